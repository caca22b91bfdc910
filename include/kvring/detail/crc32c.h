// kvring/detail/crc32c.h: CRC32C (Castagnoli, the checksum of iSCSI, ext4 and LevelDB) of a
// byte range, for the sections of kvring's state format. On x86-64 with SSE4.2, and on
// AArch64 with the CRC32 extension (crc32cx; Linux reports it in HWCAP_CRC32, every Apple
// core has it), three independent crc32 instruction streams run over thirds of each 12 KiB
// block and are joined by a precomputed shift (the instruction's latency is about three
// cycles, its throughput one per cycle); elsewhere a table-driven loop of 8 bytes a step.
// Crc32cHardwareAllowed() = false forces the table-driven loop (tests run both). Internal; no
// allocation.
#ifndef KVRING_DETAIL_CRC32C_H_
#define KVRING_DETAIL_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVRING_CRC32C_HARDWARE 1
#define KVRING_CRC32C_TARGET __attribute__((target("sse4.2")))
#include <immintrin.h>
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define KVRING_CRC32C_HARDWARE 1
#define KVRING_CRC32C_TARGET __attribute__((target("+crc")))
#include <arm_acle.h>
#if defined(__linux__)
#include <sys/auxv.h>  // getauxval, HWCAP_CRC32
#endif
#else
#define KVRING_CRC32C_HARDWARE 0
#endif

namespace kvring {
namespace detail {

// The reflected CRC32C polynomial.
inline constexpr uint32_t kCrc32cPolynomial = 0x82F63B78u;

// The tables of the 8-bytes-a-step software loop: entry [k][b] is the CRC state update of
// byte b followed by k zero bytes.
struct Crc32cTables {
  uint32_t table[8][256];
  Crc32cTables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t crc = b;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (kCrc32cPolynomial & (0u - (crc & 1)));
      table[0][b] = crc;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k) {
        table[k][b] = (table[k - 1][b] >> 8) ^ table[0][table[k - 1][b] & 0xFF];
      }
    }
  }
};
inline const Crc32cTables& SoftwareCrc32cTables() {
  static const Crc32cTables tables;
  return tables;
}

// Returns the raw CRC state (no inversion before or after) `state` updated by `size` bytes.
inline uint32_t Crc32cSoftware(uint32_t state, const uint8_t* data, size_t size) {
  const auto& t = SoftwareCrc32cTables().table;
  for (; size >= 8; size -= 8, data += 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);  // little-endian hosts (the state format requires one)
    word ^= state;
    state = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^
            t[4][(word >> 24) & 0xFF] ^ t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^
            t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
  }
  for (; size > 0; --size) state = (state >> 8) ^ t[0][(state ^ *data++) & 0xFF];
  return state;
}

// The operator that appends `len` zero bytes to a CRC32C (a 32 x 32 matrix over GF(2), built
// by repeated squaring as zlib's crc32_combine does): Crc32c(0, a followed by b) ==
// Crc32cZeros(len(b)).Apply(Crc32c(0, a)) ^ Crc32c(0, b). Build once per length, apply in 32
// steps.
class Crc32cZeros {
 public:
  explicit Crc32cZeros(uint64_t len) {
    uint32_t power[32], odd[32];  // power: 2^k zero bytes as len's bits are read
    odd[0] = kCrc32cPolynomial;   // one zero bit
    for (int n = 1; n < 32; ++n) odd[n] = uint32_t{1} << (n - 1);
    Square(power, odd);                                          // two zero bits
    Square(odd, power);                                          // four
    Square(power, odd);                                          // one zero byte
    for (int n = 0; n < 32; ++n) matrix_[n] = uint32_t{1} << n;  // none
    for (; len != 0; len >>= 1) {
      if (len & 1) {
        uint32_t next[32];
        for (int n = 0; n < 32; ++n) next[n] = Times(power, matrix_[n]);
        std::memcpy(matrix_, next, sizeof(next));
      }
      if (len > 1) {
        Square(odd, power);
        std::memcpy(power, odd, sizeof(odd));
      }
    }
  }
  uint32_t Apply(uint32_t crc) const { return Times(matrix_, crc); }

 private:
  static uint32_t Times(const uint32_t* matrix, uint32_t vector) {
    uint32_t sum = 0;
    for (; vector != 0; vector >>= 1, ++matrix) {
      if (vector & 1) sum ^= *matrix;
    }
    return sum;
  }
  static void Square(uint32_t* out, const uint32_t* matrix) {
    for (int n = 0; n < 32; ++n) out[n] = Times(matrix, matrix[n]);
  }

  uint32_t matrix_[32];
};

#if KVRING_CRC32C_HARDWARE

// Bytes of each of the three streams of one block.
inline constexpr size_t kCrc32cLane = 4096;

// The instruction on 8 bytes and on one byte (raw CRC states: no inversion).
KVRING_CRC32C_TARGET inline uint32_t Crc32cWordHardware(uint32_t state, uint64_t word) {
#if defined(__x86_64__)
  return static_cast<uint32_t>(_mm_crc32_u64(state, word));
#else
  return __crc32cd(state, word);
#endif
}
KVRING_CRC32C_TARGET inline uint32_t Crc32cByteHardware(uint32_t state, uint8_t byte) {
#if defined(__x86_64__)
  return _mm_crc32_u8(state, byte);
#else
  return __crc32cb(state, byte);
#endif
}

KVRING_CRC32C_TARGET inline uint32_t Crc32cLaneHardware(uint32_t state, const uint8_t* data,
                                                        size_t size) {
  for (; size >= 8; size -= 8, data += 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    state = Crc32cWordHardware(state, word);
  }
  for (; size > 0; --size) state = Crc32cByteHardware(state, *data++);
  return state;
}

// Writes 8 bytes at `to`: a non-temporal store on x86-64 (whole lines skip the read for
// ownership), a plain one elsewhere.
KVRING_CRC32C_TARGET inline void StoreWord(uint8_t* to, uint64_t word) {
#if defined(__x86_64__)
  _mm_stream_si64(reinterpret_cast<long long*>(to), static_cast<long long>(word));
#else
  std::memcpy(to, &word, 8);
#endif
}

// The linear map "append kCrc32cLane zero bytes" on raw CRC states, as four byte tables:
// Shift(s) = t[0][s & 0xFF] ^ t[1][(s >> 8) & 0xFF] ^ t[2][(s >> 16) & 0xFF] ^ t[3][s >> 24].
struct Crc32cShift {
  uint32_t table[4][256];
  Crc32cShift() {
    const Crc32cZeros zeros(kCrc32cLane);
    uint32_t basis[32];  // the images of the 32 unit states
    for (int bit = 0; bit < 32; ++bit) basis[bit] = zeros.Apply(uint32_t{1} << bit);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t image = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if ((b >> bit) & 1) image ^= basis[8 * k + bit];
        }
        table[k][b] = image;
      }
    }
  }
  uint32_t operator()(uint32_t s) const {
    return table[0][s & 0xFF] ^ table[1][(s >> 8) & 0xFF] ^ table[2][(s >> 16) & 0xFF] ^
           table[3][s >> 24];
  }
};

// The three-stream loop; with kCopy it also writes the bytes to `to` (x86-64: 8-byte
// non-temporal stores, the three streams' lines each filled in turn; elsewhere plain stores).
template <bool kCopy>
KVRING_CRC32C_TARGET inline uint32_t Crc32cHardwareLoop(uint32_t state, const uint8_t* data,
                                                        size_t size, uint8_t* to) {
  static const Crc32cShift shift;
  // Raw CRCs are affine: crc(s, A B C) = Shift(Shift(crc(s, A)) ^ crc(0, B)) ^ crc(0, C)
  // for lanes A, B, C of kCrc32cLane bytes each.
  for (; size >= 3 * kCrc32cLane; size -= 3 * kCrc32cLane, data += 3 * kCrc32cLane) {
    uint32_t a = state, b = 0, c = 0;
    const uint8_t* pa = data;
    const uint8_t* pb = data + kCrc32cLane;
    const uint8_t* pc = data + 2 * kCrc32cLane;
    const uint8_t* next = data + 3 * kCrc32cLane;
    for (size_t line = 0; line < kCrc32cLane; line += 64) {
      // Each stream is one page, where hardware prefetchers stop: fetch the next block's
      // three lines per line read here, so the next block is in cache when it starts. From
      // memory (256 MiB, one core, Zen 5): 8-14 GB/s without, 30 GB/s with (the
      // instruction's own rate in cache); no change in cache. Past the end: prefetches never
      // fault.
      __builtin_prefetch(next + 3 * line, 0, 3);
      __builtin_prefetch(next + 3 * line + 64, 0, 3);
      __builtin_prefetch(next + 3 * line + 128, 0, 3);
      for (size_t i = line; i < line + 64; i += 8) {
        uint64_t wa, wb, wc;
        std::memcpy(&wa, pa + i, 8);
        std::memcpy(&wb, pb + i, 8);
        std::memcpy(&wc, pc + i, 8);
        a = Crc32cWordHardware(a, wa);
        b = Crc32cWordHardware(b, wb);
        c = Crc32cWordHardware(c, wc);
        if constexpr (kCopy) {
          StoreWord(to + i, wa);
          StoreWord(to + kCrc32cLane + i, wb);
          StoreWord(to + 2 * kCrc32cLane + i, wc);
        }
      }
    }
    state = shift(shift(a) ^ b) ^ c;
    if constexpr (kCopy) to += 3 * kCrc32cLane;
  }
  if constexpr (kCopy) std::memcpy(to, data, size);
  return Crc32cLaneHardware(state, data, size);
}

KVRING_CRC32C_TARGET inline uint32_t Crc32cHardware(uint32_t state, const uint8_t* data,
                                                    size_t size) {
  return Crc32cHardwareLoop<false>(state, data, size, nullptr);
}

// Returns whether this CPU runs the instruction.
inline bool CpuHasCrc32c() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("sse4.2");
#elif defined(__linux__)
  static const bool has = (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
#elif defined(__APPLE__) || defined(__ARM_FEATURE_CRC32)
  static const bool has = true;
#else
  static const bool has = false;
#endif
  return has;
}

#endif  // KVRING_CRC32C_HARDWARE

// Whether Crc32c may use the crc32 instruction where the CPU has it (true unless a test turns
// it off, to check the table-driven loop on the same inputs). Not thread-safe to change.
inline bool& Crc32cHardwareAllowed() {
  static bool allowed = true;
  return allowed;
}

// Returns the CRC32C of `size` bytes at `data` continuing `crc` (the CRC32C of the bytes
// before them; 0 for none): Crc32c(Crc32c(0, a), b) == Crc32c(0, a followed by b).
// Crc32c(0, "123456789", 9) == 0xE3069283.
inline uint32_t Crc32c(uint32_t crc, const void* data, size_t size) {
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
#if KVRING_CRC32C_HARDWARE
  if (CpuHasCrc32c() && Crc32cHardwareAllowed()) return ~Crc32cHardware(~crc, bytes, size);
#endif
  return ~Crc32cSoftware(~crc, bytes, size);
}

// Crc32c(crc, src, size), copying the bytes to `dst` (not overlapping) in the same pass:
// where the crc32 instruction runs, with non-temporal stores on x86-64 (call a store fence
// before publishing them), for bytes in cache that go to memory (a save's staged bytes into the
// sink's). Elsewhere the checksum, then a memcpy.
inline uint32_t Crc32cCopy(uint32_t crc, void* dst, const void* src, size_t size) {
  const uint8_t* bytes = static_cast<const uint8_t*>(src);
#if KVRING_CRC32C_HARDWARE
  if (CpuHasCrc32c() && Crc32cHardwareAllowed()) {
    return ~Crc32cHardwareLoop<true>(~crc, bytes, size, static_cast<uint8_t*>(dst));
  }
#endif
  std::memcpy(dst, src, size);
  return ~Crc32cSoftware(~crc, bytes, size);
}

// Returns the CRC32C of `a` followed by `b` from crc_a = Crc32c(0, a), crc_b = Crc32c(0, b)
// and b's length. O(log len_b); reuse a Crc32cZeros for many parts of one length.
inline uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return Crc32cZeros(len_b).Apply(crc_a) ^ crc_b;
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_DETAIL_CRC32C_H_
