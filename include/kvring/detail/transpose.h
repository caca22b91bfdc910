// kvring/detail/transpose.h: blocked transposition of 16-bit (BF16) and 8-bit (int8) elements,
// for writing token rows [token][dim] into the slot-major K of the flash and tiled layouts
// ([dim][slot]). Uses SSE2
// (the x86-64 baseline, no per-target code) where the compiler offers it, plain C++ elsewhere,
// and AVX2 blocks (function target attributes, chosen at run time), with non-temporal variants
// that write whole lines; plus the prefetch and store fence those writes need, and
// TransposeRowsToBF16, which writes token rows of f32 or BF16 through them; and StreamCopy, the
// non-temporal copy of saved state's bytes (io/): all of kvring's hand-written SIMD. Internal
// to kvring's storage.
#ifndef KVRING_DETAIL_TRANSPOSE_H_
#define KVRING_DETAIL_TRANSPOSE_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kvring/bf16.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KVRING_TRANSPOSE_AVX2 1
#else
#define KVRING_TRANSPOSE_AVX2 0
#endif

namespace kvring {
namespace detail {

// Fetches the cache line at `p` into L1 ahead of a write (a read prefetch: prefetchw needs a
// target flag, and a line no other core holds arrives writable anyway). Never faults.
inline void PrefetchForWrite(const void* p) {
#if defined(__SSE2__)
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
#else
  __builtin_prefetch(p, 1);
#endif
}

// Orders the non-temporal stores issued before it (the *Stream* functions) before every
// store after it, so that a release (a mutex, an atomic) that follows publishes them too.
inline void StoreFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Whether StreamCopy writes with non-temporal stores where the compiler offers SSE2: tests
// turn it off to run the memcpy of every other architecture. Not thread-safe to change.
inline bool& StreamCopyAllowed() {
  static bool allowed = true;
  return allowed;
}

#if defined(__SSE2__)
// Copies the 64 bytes at `from` to `to` (16-byte aligned) with non-temporal stores.
inline void StreamLine(uint8_t* to, const uint8_t* from) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 16));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 32));
  const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + 48));
  _mm_stream_si128(reinterpret_cast<__m128i*>(to), a);
  _mm_stream_si128(reinterpret_cast<__m128i*>(to + 16), b);
  _mm_stream_si128(reinterpret_cast<__m128i*>(to + 32), c);
  _mm_stream_si128(reinterpret_cast<__m128i*>(to + 48), d);
}
#endif

// Copies `bytes` from `src` to `dst` (not overlapping), the 16-byte aligned part of `dst` with
// non-temporal stores (SSE2), for bytes that are not read again soon (a saved state's
// destination, a loaded state's rows): whole lines then skip the read for ownership. kFromMemory:
// `src` is in memory, not in cache (a state being loaded): blocks of four pages go a line of
// each in turn, the next block prefetched, four streams in flight where one leaves memory idle
// (glibc's memcpy does the same for large copies): 292 MiB on one core of the Intel Xeon host
// in 24.5 ms, against 36-37 a line after the other and 27-30 for memcpy. From cache (a save's
// staged bytes) a line after the other, which two threads saving at once run faster. Call
// StoreFence() after the last copy. Elsewhere, memcpy.
template <bool kFromMemory = false>
inline void StreamCopy(void* dst, const void* src, uint64_t bytes) {
#if defined(__SSE2__)
  if (StreamCopyAllowed() && bytes >= 16) {
    uint8_t* to = static_cast<uint8_t*>(dst);
    const uint8_t* from = static_cast<const uint8_t*>(src);
    const uint64_t head = (16 - (reinterpret_cast<uintptr_t>(to) & 15)) & 15;
    if (head != 0) std::memcpy(to, from, head);
    uint64_t i = head;
    constexpr uint64_t kPage = 4096;
    for (; kFromMemory && i + 4 * kPage <= bytes; i += 4 * kPage) {
      for (uint64_t line = 0; line < kPage; line += 64) {
        for (uint64_t page = 0; page < 4; ++page) {
          const uint64_t at = i + page * kPage + line;
          _mm_prefetch(reinterpret_cast<const char*>(from + at + 4 * kPage), _MM_HINT_T0);
          StreamLine(to + at, from + at);
        }
      }
    }
    for (; i + 64 <= bytes; i += 64) StreamLine(to + i, from + i);
    for (; i + 16 <= bytes; i += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(to + i),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i)));
    }
    if (i != bytes) std::memcpy(to + i, from + i, bytes - i);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

// Copies `count` rows of `row_bytes` bytes, row r from src + r * src_stride, to the contiguous
// dst + r * row_bytes: a tile's K dims gathered from a state's chunk (one row per dim). Where
// rows are whole 16-byte blocks of an aligned dst (a tiled layout's 16 or 32-byte tile rows),
// with non-temporal stores in one loop (StreamCopy per row spent more on each 32-byte row than
// on its bytes); elsewhere StreamCopy per row. Call StoreFence() after the last copy.
inline void StreamGather(void* dst, const void* src, uint64_t src_stride, uint64_t row_bytes,
                         uint64_t count) {
  uint8_t* to = static_cast<uint8_t*>(dst);
  const uint8_t* from = static_cast<const uint8_t*>(src);
#if defined(__SSE2__)
  if (StreamCopyAllowed() && row_bytes % 16 == 0 && (reinterpret_cast<uintptr_t>(to) & 15) == 0) {
    for (uint64_t r = 0; r < count; ++r, from += src_stride) {
      for (uint64_t i = 0; i < row_bytes; i += 16, to += 16) {
        _mm_stream_si128(reinterpret_cast<__m128i*>(to),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i)));
      }
    }
    return;
  }
#endif
  for (uint64_t r = 0; r < count; ++r) {
    StreamCopy(to + r * row_bytes, from + r * src_stride, row_bytes);
  }
}

// Copies `tiles` tiles of `rows` rows of `row_bytes` bytes (a run of a tiled layout's K tiles,
// contiguous in memory) from a state chunk's rows: row r of tile t from src + r * src_stride +
// t * row_bytes to dst + (t * rows + r) * row_bytes. Where a line of a tile holds a whole
// number of rows (rows of 16, 32 or 64 bytes, dst 64-byte aligned), it walks the source a
// line's rows at a time, writing that line of every tile in turn with non-temporal stores and
// prefetching the rows two lines ahead: the source is read in order and every line written
// whole (a tile at a time, its rows 512 bytes apart, took twice as long: the hardware
// prefetcher does not follow them). Elsewhere StreamGather per tile. Call StoreFence() after
// the last copy.
inline void StreamGatherTiles(void* dst, const void* src, uint64_t src_stride, uint64_t row_bytes,
                              uint64_t rows, uint64_t tiles) {
  uint8_t* to = static_cast<uint8_t*>(dst);
  const uint8_t* from = static_cast<const uint8_t*>(src);
#if defined(__SSE2__)
  const uint64_t group = row_bytes % 16 == 0 && row_bytes != 0 && 64 % row_bytes == 0
                             ? 64 / row_bytes
                             : 0;  // rows per line
  if (StreamCopyAllowed() && group != 0 && rows % group == 0 &&
      (reinterpret_cast<uintptr_t>(to) & 63) == 0) {
    constexpr uint64_t kAhead = 2;            // lines of rows
    const uint64_t span = tiles * row_bytes;  // the run's bytes of each source row
    for (uint64_t r = 0; r < rows; r += group) {
      for (uint64_t g = 0; r + kAhead * group < rows && g < group; ++g) {
        const uint8_t* ahead = from + (r + kAhead * group + g) * src_stride;
        for (uint64_t at = 0; at < span; at += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(ahead + at), _MM_HINT_T0);
        }
        _mm_prefetch(reinterpret_cast<const char*>(ahead + span - 1), _MM_HINT_T0);
      }
      for (uint64_t t = 0; t < tiles; ++t) {
        uint8_t* line = to + (t * rows + r) * row_bytes;
        for (uint64_t g = 0; g < group; ++g) {
          const uint8_t* row = from + (r + g) * src_stride + t * row_bytes;
          for (uint64_t i = 0; i < row_bytes; i += 16) {
            _mm_stream_si128(reinterpret_cast<__m128i*>(line + g * row_bytes + i),
                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i)));
          }
        }
      }
    }
    return;
  }
#endif
  for (uint64_t t = 0; t < tiles; ++t) {
    StreamGather(to + t * rows * row_bytes, from + t * row_bytes, src_stride, row_bytes, rows);
  }
}

// Whether the SSE2 blocks (Transpose8x8, Transpose16x16Bytes) run where the compiler offers
// SSE2: tests turn it off to run their plain C++ blocks, the path of every other
// architecture, on an x86 machine. Not thread-safe to change.
inline bool& TransposeSse2Allowed() {
  static bool allowed = true;
  return allowed;
}

// Writes dst[d * dst_stride + t] = src[t * src_stride + d] for t, d < kN: the plain C++ block
// behind every SIMD one.
template <uint64_t kN, typename E>
inline void TransposeBlockPlain(const E* src, uint64_t src_stride, E* dst, uint64_t dst_stride) {
  for (uint64_t d = 0; d < kN; ++d) {
    for (uint64_t t = 0; t < kN; ++t) dst[d * dst_stride + t] = src[t * src_stride + d];
  }
}

// Writes dst[d * dst_stride + t] = src[t * src_stride + d] for t, d < 8 (uint16_t elements).
inline void Transpose8x8(const uint16_t* src, uint64_t src_stride, uint16_t* dst,
                         uint64_t dst_stride) {
#if defined(__SSE2__)
  if (!TransposeSse2Allowed()) return TransposeBlockPlain<8>(src, src_stride, dst, dst_stride);
  __m128i r[8];
  for (uint64_t t = 0; t < 8; ++t) {
    r[t] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + t * src_stride));
  }
  // Interleave pairs of rows three times (16-, 32-, then 64-bit): row t's element d ends up
  // in lane t of output d.
  __m128i a[8], b[8];
  for (uint64_t i = 0; i < 4; ++i) {
    a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (uint64_t base = 0; base < 8; base += 4) {
    b[base + 0] = _mm_unpacklo_epi32(a[base + 0], a[base + 2]);
    b[base + 1] = _mm_unpackhi_epi32(a[base + 0], a[base + 2]);
    b[base + 2] = _mm_unpacklo_epi32(a[base + 1], a[base + 3]);
    b[base + 3] = _mm_unpackhi_epi32(a[base + 1], a[base + 3]);
  }
  for (uint64_t i = 0; i < 4; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * i) * dst_stride),
                     _mm_unpacklo_epi64(b[i], b[i + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * i + 1) * dst_stride),
                     _mm_unpackhi_epi64(b[i], b[i + 4]));
  }
#else
  TransposeBlockPlain<8>(src, src_stride, dst, dst_stride);
#endif
}

// Writes dst[d * dst_stride + t] = src[t * src_stride + d] for t, d < 16 (8-bit elements).
inline void Transpose16x16Bytes(const uint8_t* src, uint64_t src_stride, uint8_t* dst,
                                uint64_t dst_stride) {
#if defined(__SSE2__)
  if (!TransposeSse2Allowed()) return TransposeBlockPlain<16>(src, src_stride, dst, dst_stride);
  __m128i a[16], b[16];
  for (uint64_t t = 0; t < 16; ++t) {
    a[t] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + t * src_stride));
  }
  // Each round interleaves register i with register i + 8 byte by byte, which rotates the
  // 8-bit address (row, column) of every element left by one bit; four rounds swap row and
  // column.
  for (int round = 0; round < 4; ++round) {
    for (uint64_t i = 0; i < 8; ++i) {
      b[2 * i] = _mm_unpacklo_epi8(a[i], a[i + 8]);
      b[2 * i + 1] = _mm_unpackhi_epi8(a[i], a[i + 8]);
    }
    for (uint64_t i = 0; i < 16; ++i) a[i] = b[i];
  }
  for (uint64_t d = 0; d < 16; ++d) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + d * dst_stride), a[d]);
  }
#else
  TransposeBlockPlain<16>(src, src_stride, dst, dst_stride);
#endif
}

#if KVRING_TRANSPOSE_AVX2

// Returns whether this CPU runs AVX2 (checked once).
inline bool CpuHasAvx2() {
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  return has_avx2;
}

// Writes dst[d * dst_stride + t] = src[t * src_stride + d] for t, d < 16 (uint16_t elements),
// with 32-byte loads and stores; kStream: non-temporal stores, and every dst row must be
// 32-byte aligned (see StoreFence). Call only if CpuHasAvx2().
template <bool kStream = false>
__attribute__((target("avx2"))) inline void Transpose16x16Avx2(const uint16_t* src,
                                                               uint64_t src_stride, uint16_t* dst,
                                                               uint64_t dst_stride) {
  __m256i r[16], a[16], b[16], c[16];
  for (uint64_t t = 0; t < 16; ++t) {
    r[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + t * src_stride));
  }
  // Within each 128-bit lane (dims 0-7 low, 8-15 high) interleave 16-, 32-, then 64-bit
  // pieces: afterwards c[2k + h] of token group g (tokens 8g..8g+7) holds dim 2k + h in its low
  // lane and dim 2k + h + 8 in its high lane.
  for (uint64_t i = 0; i < 8; ++i) {
    a[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (uint64_t base = 0; base < 16; base += 4) {
    b[base + 0] = _mm256_unpacklo_epi32(a[base + 0], a[base + 2]);
    b[base + 1] = _mm256_unpackhi_epi32(a[base + 0], a[base + 2]);
    b[base + 2] = _mm256_unpacklo_epi32(a[base + 1], a[base + 3]);
    b[base + 3] = _mm256_unpackhi_epi32(a[base + 1], a[base + 3]);
  }
  for (uint64_t group = 0; group < 2; ++group) {
    const uint64_t in = 8 * group, out = 8 * group;
    for (uint64_t k = 0; k < 4; ++k) {
      c[out + 2 * k] = _mm256_unpacklo_epi64(b[in + k], b[in + k + 4]);
      c[out + 2 * k + 1] = _mm256_unpackhi_epi64(b[in + k], b[in + k + 4]);
    }
  }
  // Join the token groups: dim j takes the low lanes, dim j + 8 the high lanes.
  for (uint64_t j = 0; j < 8; ++j) {
    const __m256i low = _mm256_permute2x128_si256(c[j], c[8 + j], 0x20);
    const __m256i high = _mm256_permute2x128_si256(c[j], c[8 + j], 0x31);
    __m256i* to_low = reinterpret_cast<__m256i*>(dst + j * dst_stride);
    __m256i* to_high = reinterpret_cast<__m256i*>(dst + (j + 8) * dst_stride);
    if constexpr (kStream) {  // (a lambda would lose the function's target attribute)
      _mm256_stream_si256(to_low, low);
      _mm256_stream_si256(to_high, high);
    } else {
      _mm256_storeu_si256(to_low, low);
      _mm256_storeu_si256(to_high, high);
    }
  }
}

// Writes dst[d * dst_stride + t] = src[t * src_stride + d] for t < 32, d < 16 (uint16_t
// elements) with non-temporal stores of whole 64-byte lines: two 16 x 16 blocks go through a
// 1 KiB stack buffer, then each of the 16 rows leaves in one line, without the read the
// hardware would otherwise do for a line it does not hold. dst and every row must be 64-byte
// aligned (see StoreFence). Call only if CpuHasAvx2().
__attribute__((target("avx2"))) inline void Transpose32x16StreamAvx2(const uint16_t* src,
                                                                     uint64_t src_stride,
                                                                     uint16_t* dst,
                                                                     uint64_t dst_stride) {
  alignas(64) uint16_t stage[16 * 32];
  Transpose16x16Avx2<false>(src, src_stride, stage, 32);
  Transpose16x16Avx2<false>(src + 16 * src_stride, src_stride, stage + 16, 32);
  for (uint64_t d = 0; d < 16; ++d) {
    const __m256i lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(stage + d * 32));
    const __m256i hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(stage + d * 32 + 16));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + d * dst_stride), lo);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + d * dst_stride + 16), hi);
  }
}

#endif  // KVRING_TRANSPOSE_AVX2

// Returns `value` as BF16: f32 rounded to nearest even, BF16 as it is.
inline BF16 ToBF16(float value) { return BF16FromF32(value); }
inline BF16 ToBF16(BF16 value) { return value; }

// Writes out[d * dst_stride + t] = src[t * src_stride + d] as BF16 bits for tokens
// [t_begin, t_end) and dims [d_begin, num_dims), one element at a time (the edges).
template <typename T>
inline void TransposeScalar(const T* src, uint64_t src_stride, uint16_t* out, uint64_t dst_stride,
                            uint64_t t_begin, uint64_t t_end, uint64_t d_begin, uint64_t num_dims) {
  for (uint64_t d = d_begin; d < num_dims; ++d) {
    for (uint64_t t = t_begin; t < t_end; ++t) {
      out[d * dst_stride + t] = ToBF16(src[t * src_stride + d]).bits;
    }
  }
}

// Returns the 16-bit source block of kRows tokens x kRows dims at (t0, d0) and sets *stride to
// its row stride: the rows themselves for BF16, else `block` after rounding them.
template <uint64_t kRows, typename T>
inline const uint16_t* SourceBlock(const T* src, uint64_t src_stride, uint64_t t0, uint64_t d0,
                                   uint16_t* block, uint64_t* stride) {
  if constexpr (std::is_same<T, BF16>::value) {
    *stride = src_stride;
    return reinterpret_cast<const uint16_t*>(src + t0 * src_stride + d0);
  } else {
    for (uint64_t t = 0; t < kRows; ++t) {
      for (uint64_t d = 0; d < kRows; ++d) {
        block[t * kRows + d] = ToBF16(src[(t0 + t) * src_stride + d0 + d]).bits;
      }
    }
    *stride = kRows;
    return block;
  }
}

// Flash K rows are num_slots apart: a batch writes one stream per (kv_head, dim), too many for
// the hardware prefetcher, and each store would wait for its line. Once per 32 tokens (a
// 64-byte line of a row), fetches for writing the line kTransposePrefetchTokens ahead in each
// of `rows` rows from d0 (measured, interleaved A/B: 512-token flash appends 0.59 ->
// 0.67-0.75 of memcpy into a ring, 0.60-0.79 -> 0.81-0.94 into flat storage). Tiled runs end
// at their tile, shorter than that: their rows are contiguous.
inline constexpr uint64_t kTransposePrefetchTokens = 64;
inline void PrefetchRowsAhead(uint16_t* out, uint64_t dst_stride, uint64_t t, uint64_t d0,
                              uint64_t rows, uint64_t num_tokens) {
  if (t % 32 != 0 || t + kTransposePrefetchTokens >= num_tokens) return;
  for (uint64_t r = 0; r < rows; ++r) {
    PrefetchForWrite(out + (d0 + r) * dst_stride + t + kTransposePrefetchTokens);
  }
}

// Whether TransposeRowsToBF16 may take its AVX2 paths where the CPU runs them: tests turn it
// off to run the SSE2 (or plain C++) blocks on an AVX2 machine. Not thread-safe to change.
inline bool& TransposeAvx2Allowed() {
  static bool allowed = true;
  return allowed;
}

template <typename T>
void TransposeRowsToBF16(const T* src, uint64_t src_stride, BF16* dst, uint64_t dst_stride,
                         uint64_t num_tokens, uint64_t num_dims, bool stream = false);

#if KVRING_TRANSPOSE_AVX2
// The AVX2 part of TransposeRowsToBF16 (call only if CpuHasAvx2()): whole tiled16 tiles and
// 32-token runs with non-temporal stores when `stream`, then 16 x 16 blocks. Returns the
// tokens it wrote, from the first (num_tokens: all).
template <typename T>
uint64_t TransposeRowsAvx2(const T* src, uint64_t src_stride, uint16_t* out, uint64_t dst_stride,
                           uint64_t num_tokens, uint64_t num_dims, bool stream) {
  constexpr uint64_t k16 = 16;
  uint64_t t0 = 0;
  const uintptr_t address = reinterpret_cast<uintptr_t>(out);
  if (stream && dst_stride == 16 && num_tokens == 16 && address % 64 == 0) {
    // A whole TiledLayout<16> tile: each 16 x 16 block is 512 contiguous bytes.
    uint64_t d0 = 0;
    for (; d0 + 16 <= num_dims; d0 += 16) {
      uint16_t block[256];
      uint64_t stride;
      const uint16_t* in = SourceBlock<k16>(src, src_stride, 0, d0, block, &stride);
      Transpose16x16Avx2<true>(in, stride, out + d0 * dst_stride, dst_stride);
    }
    TransposeScalar(src, src_stride, out, dst_stride, 0, 16, d0, num_dims);
    return num_tokens;
  }
  if (stream && dst_stride % 32 == 0 && num_tokens >= 32) {
    // Flash rows (num_slots apart) and TiledLayout<32> tiles: 32 tokens fill a row's line.
    // Tokens before the first 64-byte boundary of a row go the cached way.
    const uint64_t lead = (64 - address % 64) % 64 / 2;
    if (lead > 0) {
      TransposeRowsToBF16(src, src_stride, reinterpret_cast<BF16*>(out), dst_stride, lead,
                          num_dims);
    }
    for (t0 = lead; t0 + 32 <= num_tokens; t0 += 32) {
      uint64_t d0 = 0;
      for (; d0 + 16 <= num_dims; d0 += 16) {
        // Tokens t0..t0+31 of dims d0..d0+15 (from f32 rows: rounded into `block`, 16 tokens
        // per call of SourceBlock, one after the other).
        uint16_t block[512];
        uint64_t stride;
        const uint16_t* in = SourceBlock<k16>(src, src_stride, t0, d0, block, &stride);
        if constexpr (!std::is_same<T, BF16>::value) {
          SourceBlock<k16>(src, src_stride, t0 + 16, d0, block + 256, &stride);
        }
        Transpose32x16StreamAvx2(in, stride, out + d0 * dst_stride + t0, dst_stride);
      }
      TransposeScalar(src, src_stride, out, dst_stride, t0, t0 + 32, d0, num_dims);
    }
  }
  // 16 x 16 blocks: 32-byte loads and stores, half the shuffles of 8 x 8.
  for (; t0 + 16 <= num_tokens; t0 += 16) {
    uint64_t d0 = 0;
    for (; d0 + 16 <= num_dims; d0 += 16) {
      uint16_t block[256];
      uint64_t stride;
      const uint16_t* in = SourceBlock<k16>(src, src_stride, t0, d0, block, &stride);
      PrefetchRowsAhead(out, dst_stride, t0, d0, 16, num_tokens);
      Transpose16x16Avx2<false>(in, stride, out + d0 * dst_stride + t0, dst_stride);
    }
    TransposeScalar(src, src_stride, out, dst_stride, t0, t0 + 16, d0, num_dims);
  }
  return t0;
}
#endif  // KVRING_TRANSPOSE_AVX2

// Writes dst[dim * dst_stride + t] = src[t * src_stride + dim] as BF16 (f32 rounded to
// nearest even), for t < num_tokens and dim < num_dims: AVX2 blocks where the CPU runs them
// (and TransposeAvx2Allowed()), then 8 x 8 blocks (SSE2, or plain C++), then the edges.
// `stream`: whole 64-byte lines may go out with non-temporal stores (the caller fences).
template <typename T>
void TransposeRowsToBF16(const T* src, uint64_t src_stride, BF16* dst, uint64_t dst_stride,
                         uint64_t num_tokens, uint64_t num_dims, bool stream) {
  static_assert(sizeof(BF16) == sizeof(uint16_t), "BF16 is 16 bits");
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  uint64_t t0 = 0;
#if KVRING_TRANSPOSE_AVX2
  if (CpuHasAvx2() && TransposeAvx2Allowed()) {
    t0 = TransposeRowsAvx2(src, src_stride, out, dst_stride, num_tokens, num_dims, stream);
  }
#endif
  constexpr uint64_t k8 = 8;
  for (; t0 + 8 <= num_tokens; t0 += 8) {
    uint64_t d0 = 0;
    for (; d0 + 8 <= num_dims; d0 += 8) {
      uint16_t block[64];
      uint64_t stride;
      const uint16_t* in = SourceBlock<k8>(src, src_stride, t0, d0, block, &stride);
      PrefetchRowsAhead(out, dst_stride, t0, d0, 8, num_tokens);
      Transpose8x8(in, stride, out + d0 * dst_stride + t0, dst_stride);
    }
    TransposeScalar(src, src_stride, out, dst_stride, t0, t0 + 8, d0, num_dims);
  }
  TransposeScalar(src, src_stride, out, dst_stride, t0, num_tokens, 0, num_dims);
}

}  // namespace detail
}  // namespace kvring

#endif  // KVRING_DETAIL_TRANSPOSE_H_
