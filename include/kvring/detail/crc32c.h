// kvring/detail/crc32c.h: CRC32C (Castagnoli, the checksum of iSCSI, ext4 and LevelDB) of a
// byte range, for the sections of kvring's state format. On x86-64 CPUs with AVX-512 and
// VPCLMULQDQ, ranges of 1 KiB or more fold 256 bytes a step with carry-less products
// (Crc32cFoldLoop; from 64 KiB in four streams, Crc32cFoldQuarters). Otherwise on x86-64 with
// SSE4.2, and on AArch64 with the CRC32 extension (crc32cx; Linux reports it in HWCAP_CRC32,
// every Apple core has it), three independent crc32 instruction streams run over thirds of
// each 12 KiB block and are joined by a precomputed shift (the instruction's latency is about
// three cycles, its throughput one per cycle); elsewhere a table-driven loop of 8 bytes a step.
// Crc32cFoldAllowed() = false forces the instruction's loop, Crc32cHardwareAllowed() = false the
// table-driven one (tests run all three). Internal; no allocation.
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

// The linear map "append kCrc32cLane (or `len`) zero bytes" on raw CRC states, as four byte
// tables:
// Shift(s) = t[0][s & 0xFF] ^ t[1][(s >> 8) & 0xFF] ^ t[2][(s >> 16) & 0xFF] ^ t[3][s >> 24].
struct Crc32cShift {
  uint32_t table[4][256];
  explicit Crc32cShift(uint64_t len = kCrc32cLane) {
    const Crc32cZeros zeros(len);
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

#if defined(__x86_64__)
#define KVRING_CRC32C_FOLD 1
#define KVRING_CRC32C_FOLD_TARGET __attribute__((target("sse4.2,pclmul,avx512f,vpclmulqdq")))

// Whether this CPU multiplies carry-less in 512-bit vectors (AVX-512 and VPCLMULQDQ: Intel
// since Ice Lake, AMD since Zen 4), which Crc32cFoldLoop needs.
inline bool CpuFoldsCrc32c() {
  static const bool has = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul") &&
                          __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
  return has;
}

// Bytes below which the instruction's loop runs instead of the folding one.
inline constexpr size_t kCrc32cFoldMin = 1024;

// The 128-bit lanes of x moved F bits on (as polynomials, modulo the CRC's) and added to
// `data`: k holds x^(F + 63) and x^(F - 1) mod P, bit-reflected, in its lanes' low and high
// words (Crc32cFoldLoop). Each product is below 2^96: the sum stays in 128 bits.
KVRING_CRC32C_FOLD_TARGET inline __m512i Fold512(__m512i x, __m512i k, __m512i data) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                   _mm512_clmulepi64_epi128(x, k, 0x11), data, 0x96);
}
KVRING_CRC32C_FOLD_TARGET inline __m128i Fold128(__m128i x, __m128i k, __m128i data) {
  return _mm_xor_si128(
      _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), data);
}
// Fold128's and (in every lane) Fold512's k for F bits (F = 2048: the next 256-byte block;
// 512: the next vector; 384, 256, 128: the last vector's lanes into its last). (Set, not
// broadcast and extract intrinsics: g++ 12's use an undefined value it then warns about.)
KVRING_CRC32C_FOLD_TARGET inline __m128i FoldBy(uint64_t for_low, uint64_t for_high) {
  return _mm_set_epi64x(static_cast<long long>(for_high), static_cast<long long>(for_low));
}
KVRING_CRC32C_FOLD_TARGET inline __m512i FoldBy512(uint64_t for_low, uint64_t for_high) {
  const auto l = static_cast<long long>(for_low), h = static_cast<long long>(for_high);
  return _mm512_set_epi64(h, l, h, l, h, l, h, l);
}

// Loads the 64 bytes at from + at; with kCopy also stores them at to + at (64-byte aligned),
// non-temporal.
template <bool kCopy>
KVRING_CRC32C_FOLD_TARGET inline __m512i FoldLoad(const uint8_t* from, uint8_t* to, size_t at) {
  const __m512i v = _mm512_loadu_si512(from + at);
  if constexpr (kCopy) _mm512_stream_si512(reinterpret_cast<__m512i*>(to + at), v);
  return v;
}

// Starts the four sums of Crc32cFoldLoop on the 256 bytes at `from` (kCopy: also stored at
// `to`): the raw state enters as the first four bytes' sum with it.
template <bool kCopy>
KVRING_CRC32C_FOLD_TARGET inline void StartFold(__m512i* x, uint32_t state, const uint8_t* from,
                                                uint8_t* to) {
  for (size_t i = 0; i < 4; ++i) x[i] = FoldLoad<kCopy>(from, to, 64 * i);
  x[0] = _mm512_xor_si512(x[0], _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(state))));
}
// Carries the four sums 2048 bits on and adds the next 256 bytes, at `from` (kCopy: also
// stored at `to`), prefetching 2 KiB ahead: from memory, 292 MiB in 22-23 ms instead of 25 on
// one core of the Intel Xeon host. Past the end: prefetches never fault.
template <bool kCopy>
KVRING_CRC32C_FOLD_TARGET inline void FoldBlock(__m512i* x, const uint8_t* from, uint8_t* to) {
  const __m512i by_block = FoldBy512(0xe9a5d8be00000000u, 0x1426a81500000000u);
  for (size_t i = 0; i < 4; ++i) {
    __builtin_prefetch(from + 2048 + 64 * i, 0, 3);
    x[i] = Fold512(x[i], by_block, FoldLoad<kCopy>(from, to, 64 * i));
  }
}

// The CRC, from a zero state, of everything four sums of Crc32cFoldLoop hold (x[0] the
// oldest): the four folded into one 128-bit lane, whose 16 bytes the crc32 instruction takes.
KVRING_CRC32C_FOLD_TARGET inline uint32_t FoldedCrc(__m512i* x) {
  const __m512i by_vector = FoldBy512(0x1c19243b00000000u, 0x75bba45b00000000u);
  for (size_t i = 1; i < 4; ++i) x[i] = Fold512(x[i - 1], by_vector, x[i]);
  __m128i lanes[4];
  _mm512_storeu_si512(lanes, x[3]);
  __m128i lane = Fold128(lanes[0], FoldBy(0xa46ef4aa00000000u, 0x6051243f00000000u), lanes[3]);
  lane = Fold128(lanes[1], FoldBy(0x33ccbbbc00000000u, 0xa2158b3400000000u), lane);
  lane = Fold128(lanes[2], FoldBy(0x3743f7bd00000000u, 0x3171d43000000000u), lane);
  const uint32_t low = Crc32cWordHardware(0, static_cast<uint64_t>(_mm_cvtsi128_si64(lane)));
  return Crc32cWordHardware(low, static_cast<uint64_t>(_mm_extract_epi64(lane, 1)));
}

// Bytes of each of the four streams of Crc32cFoldQuarters.
inline constexpr size_t kCrc32cFoldQuarter = 16384;

// The raw CRC state `state` updated by the whole blocks of four quarters (kCrc32cFoldQuarter
// bytes each) at *data, which it moves past them (and *size down): each quarter folds in four
// sums of its own, the four quarters' lines in turn, so that four streams from memory are in
// flight where one leaves memory idle part of the time; their CRCs are joined by the shift of
// a quarter's zeros. 292 MiB in 1 MiB pieces from memory on one core of the Intel Xeon host:
// 17.5-18.8 ms, against 20.5-22.8 for one stream.
KVRING_CRC32C_FOLD_TARGET inline uint32_t Crc32cFoldQuarters(uint32_t state, const uint8_t** data,
                                                             size_t* size) {
  static const Crc32cShift by_quarter(kCrc32cFoldQuarter);
  for (; *size >= 4 * kCrc32cFoldQuarter; *size -= 4 * kCrc32cFoldQuarter) {
    const uint8_t* quarter = *data;
    __m512i x[4][4];
    for (size_t q = 0; q < 4; ++q) {
      StartFold<false>(x[q], q == 0 ? state : 0, quarter + q * kCrc32cFoldQuarter, nullptr);
    }
    for (size_t at = 256; at < kCrc32cFoldQuarter; at += 256) {
      for (size_t q = 0; q < 4; ++q) {
        FoldBlock<false>(x[q], quarter + q * kCrc32cFoldQuarter + at, nullptr);
      }
    }
    state = FoldedCrc(x[0]);
    for (size_t q = 1; q < 4; ++q) state = by_quarter(state) ^ FoldedCrc(x[q]);
    *data += 4 * kCrc32cFoldQuarter;
  }
  return state;
}

// The raw CRC state `state` updated by `size` bytes at `data` (size >= kCrc32cFoldMin), by
// folding: 256 bytes a step in four 512-bit sums of 128-bit lanes, each lane carried 2048
// bits on by carry-less products (Intel's "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ", for the reflected polynomial), the four folded into one lane at the end, whose
// CRC and the last bytes' the crc32 instruction takes. With kCopy, also writes the bytes to
// `to` (non-temporal 64-byte stores from the first 64-byte boundary of `to`: call a store
// fence before publishing them). On the Intel Xeon host, 292 MiB: 22-23 ms from memory (the
// instruction's loop 34), and with kCopy from a stage in cache to memory 14 ms, the copy's own
// time (24).
template <bool kCopy>
KVRING_CRC32C_FOLD_TARGET inline uint32_t Crc32cFoldLoop(uint32_t state, const uint8_t* data,
                                                         size_t size, uint8_t* to) {
  if constexpr (!kCopy) {
    if (size >= 4 * kCrc32cFoldQuarter) {
      state = Crc32cFoldQuarters(state, &data, &size);
      if (size < kCrc32cFoldMin) return Crc32cLaneHardware(state, data, size);
    }
  } else {
    const size_t head = (64 - (reinterpret_cast<uintptr_t>(to) & 63)) & 63;
    std::memcpy(to, data, head);
    state = Crc32cLaneHardware(state, data, head);
    data += head;
    to += head;
    size -= head;
  }
  __m512i x[4];
  StartFold<kCopy>(x, state, data, to);
  for (; size >= 2 * 256; size -= 256) {
    data += 256;
    if constexpr (kCopy) to += 256;
    FoldBlock<kCopy>(x, data, to);
  }
  data += 256;
  size -= 256;
  if constexpr (kCopy) to += 256;
  state = FoldedCrc(x);
  if constexpr (kCopy) std::memcpy(to, data, size);
  return Crc32cLaneHardware(state, data, size);
}
#undef KVRING_CRC32C_FOLD_TARGET
#else
#define KVRING_CRC32C_FOLD 0
#endif  // defined(__x86_64__)

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
// Whether Crc32c may fold with carry-less products where the CPU has them (CpuFoldsCrc32c;
// true unless a test turns it off, to check the crc32 instruction's loop on the same inputs).
// Not thread-safe to change.
inline bool& Crc32cFoldAllowed() {
  static bool allowed = true;
  return allowed;
}

#if KVRING_CRC32C_HARDWARE && KVRING_CRC32C_FOLD
// Whether Crc32c and Crc32cCopy fold `size` bytes (Crc32cFoldLoop).
inline bool Crc32cFolds(size_t size) {
  return size >= kCrc32cFoldMin && Crc32cHardwareAllowed() && Crc32cFoldAllowed() &&
         CpuFoldsCrc32c();
}
#endif

// Returns the CRC32C of `size` bytes at `data` continuing `crc` (the CRC32C of the bytes
// before them; 0 for none): Crc32c(Crc32c(0, a), b) == Crc32c(0, a followed by b).
// Crc32c(0, "123456789", 9) == 0xE3069283.
inline uint32_t Crc32c(uint32_t crc, const void* data, size_t size) {
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
#if KVRING_CRC32C_HARDWARE
#if KVRING_CRC32C_FOLD
  if (Crc32cFolds(size)) return ~Crc32cFoldLoop<false>(~crc, bytes, size, nullptr);
#endif
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
#if KVRING_CRC32C_FOLD
  if (Crc32cFolds(size)) {
    return ~Crc32cFoldLoop<true>(~crc, bytes, size, static_cast<uint8_t*>(dst));
  }
#endif
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
