// A library preloaded into qemu-aarch64 by the aarch64 preset's tests on Intel hosts
// (cmake/KvringQemuHost.cmake): it hides AVX2 and AVX-512 from the CPUID queries qemu makes while
// it starts, so qemu's code generator emits 128-bit AVX code instead of 256-bit code. On Intel
// CPUs 256-bit code leaves the registers' upper halves in use, and every SSE instruction of the
// C helpers qemu calls for floating point (float32_muladd and the like) then pays a state
// transition: an emulated SVE sweep at 256 or 512 bits took 6-7 times what it takes at 128 bits
// on an Intel Xeon VM, and about as long with this library. It changes how qemu translates,
// never what the emulated program computes. Linux only: it relies on CPUID faulting
// (arch_prctl ARCH_SET_CPUID), and leaves qemu alone where the CPU cannot fault on CPUID or is
// not Intel's.
#include <asm/prctl.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace {

using SigactionFunction = int (*)(int, const struct sigaction*, struct sigaction*);

// The C library's sigaction, which the one below stands in front of.
SigactionFunction RealSigaction() {
  static const auto real = reinterpret_cast<SigactionFunction>(dlsym(RTLD_NEXT, "sigaction"));
  return real;
}

// Whether CPUID faults on the threads that started from the thread that turned faulting on.
bool faulting_started = false;
// The SIGSEGV action the program asked for, which FaultOrCpuid passes every other fault to.
struct sigaction program_action;

int AllowCpuid(int allowed) {
  return static_cast<int>(syscall(SYS_arch_prctl, ARCH_SET_CPUID, allowed));
}

// Leaf 7, subleaf 0, EBX: AVX2 (5), AVX512F (16), AVX512DQ (17), AVX512BW (30), AVX512VL (31).
constexpr uint32_t kHiddenLeaf7Ebx = (1u << 5) | (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);

// Runs a faulting CPUID with the wide vector features hidden and steps over it; passes any
// other SIGSEGV to the program's action as the kernel would have.
void FaultOrCpuid(int signal_number, siginfo_t* info, void* context) {
  greg_t* registers = static_cast<ucontext_t*>(context)->uc_mcontext.gregs;
  const auto* instruction = reinterpret_cast<const unsigned char*>(registers[REG_RIP]);
  if (info->si_code == SI_KERNEL && instruction[0] == 0x0f && instruction[1] == 0xa2) {
    const auto leaf = static_cast<uint32_t>(registers[REG_RAX]);
    const auto subleaf = static_cast<uint32_t>(registers[REG_RCX]);
    uint32_t a = 0, b = 0, c = 0, d = 0;
    AllowCpuid(1);
    __cpuid_count(leaf, subleaf, a, b, c, d);
    AllowCpuid(0);
    if (leaf == 7 && subleaf == 0) b &= ~kHiddenLeaf7Ebx;
    registers[REG_RAX] = a;
    registers[REG_RBX] = b;
    registers[REG_RCX] = c;
    registers[REG_RDX] = d;
    registers[REG_RIP] += 2;
    return;
  }
  const struct sigaction action = program_action;
  if ((action.sa_flags & static_cast<int>(SA_RESETHAND)) != 0) {
    std::memset(&program_action, 0, sizeof(program_action));
    program_action.sa_handler = SIG_DFL;
  }
  if (action.sa_flags & SA_SIGINFO) {
    action.sa_sigaction(signal_number, info, context);
  } else if (action.sa_handler == SIG_DFL) {
    // The default action: a fault happens again as this returns and kills the process with
    // the kernel's default; a SIGSEGV sent by a process is sent again.
    struct sigaction default_action;
    std::memset(&default_action, 0, sizeof(default_action));
    default_action.sa_handler = SIG_DFL;
    RealSigaction()(SIGSEGV, &default_action, nullptr);
    if (info->si_code <= 0) raise(SIGSEGV);
  } else if (action.sa_handler != SIG_IGN) {
    action.sa_handler(signal_number);
  }
}

// Installs FaultOrCpuid with the mask and flags the program asked for, so the kernel blocks
// and restarts as it would for the program's own handler.
int InstallFaultOrCpuid(const struct sigaction& like) {
  struct sigaction action = like;
  action.sa_sigaction = FaultOrCpuid;
  action.sa_flags = (like.sa_flags | SA_SIGINFO) & ~static_cast<int>(SA_RESETHAND);
  return RealSigaction()(SIGSEGV, &action, nullptr);
}

bool IntelWithAvx2() {
  uint32_t max_leaf = 0, b = 0, c = 0, d = 0;
  __cpuid(0, max_leaf, b, c, d);
  const bool intel = b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e;  // "GenuineIntel"
  if (!intel || max_leaf < 7) return false;
  uint32_t a = 0;
  __cpuid_count(7, 0, a, b, c, d);
  return (b & (1u << 5)) != 0;
}

__attribute__((constructor)) void StartFaulting() {
  if (!RealSigaction() || !IntelWithAvx2()) return;
  struct sigaction blocking_all;
  std::memset(&blocking_all, 0, sizeof(blocking_all));
  sigfillset(&blocking_all.sa_mask);
  if (RealSigaction()(SIGSEGV, nullptr, &program_action) != 0) return;
  if (InstallFaultOrCpuid(blocking_all) != 0) return;
  if (AllowCpuid(0) != 0) {
    RealSigaction()(SIGSEGV, &program_action, nullptr);
    return;
  }
  faulting_started = true;
}

}  // namespace

// The program's SIGSEGV actions are kept and FaultOrCpuid stays in front of them, for the threads
// started while CPUID faulted. qemu sets its action once its code generator has asked CPUID
// what it may use: from then on this thread, and the threads it starts, run CPUID as is.
extern "C" int sigaction(int signal_number, const struct sigaction* action,
                         struct sigaction* old_action) {
  if (signal_number != SIGSEGV || !faulting_started) {
    return RealSigaction()(signal_number, action, old_action);
  }
  struct sigaction previous = program_action;
  if (action) {
    if (InstallFaultOrCpuid(*action) != 0) return -1;
    program_action = *action;
    AllowCpuid(1);
  }
  if (old_action) *old_action = previous;
  return 0;
}
