// kvring/formats/format.h: how one K or V element of a layer is stored, chosen per layer in
// the plan: BF16, or symmetric int8 with one f32 scale per (pos, kv_head) of K and of V
// (kvring/formats/int8.h), its K as given or rotated per head (kvring/formats/hadamard.h);
// and the formats a plan only counts (f16, f32, fp8). The one vocabulary of element formats,
// for storage and accounting alike: the runtime's element type (RuntimeSpec::element_type)
// is a Format too. Names and byte counts only; no storage, no vector code.
#ifndef KVRING_FORMATS_FORMAT_H_
#define KVRING_FORMATS_FORMAT_H_

#include <cstdint>

namespace kvring {

enum class Format : uint8_t {
  kBF16,  // 2 bytes an element, written from f32 with round to nearest even
  kInt8,  // 1 byte an element, plus a 4-byte f32 scale per (pos, kv_head) and stream
  // Accounting only (IsAccountingOnly): a plan counts their bytes (what-if sizing, e.g.
  // kvring-plan --dtype), no storage holds them.
  kF16,  // 2 bytes an element
  kF32,  // 4 bytes an element
  kFP8,  // 1 byte an element, no scales counted
  // Stored as kInt8, with each K row (pos, kv_head) rotated by an orthonormal Hadamard
  // transform before it is encoded (RotateHadamard), so that a few large channels spread over
  // the row instead of setting its scale; attention rotates the queries alike (q.k is
  // unchanged), and rows read back in f32 are rotated back. V as kInt8. Not for latent (MLA)
  // layers, whose values are K.
  kInt8Hadamard,
};

// Returns the format's name as kvring-plan prints it ("bf16", "int8", "f16", "f32", "fp8",
// "int8h"), or "invalid" for a value outside the enum.
inline const char* ToString(Format format) {
  switch (format) {
    case Format::kBF16:
      return "bf16";
    case Format::kInt8:
      return "int8";
    case Format::kF16:
      return "f16";
    case Format::kF32:
      return "f32";
    case Format::kFP8:
      return "fp8";
    case Format::kInt8Hadamard:
      return "int8h";
  }
  return "invalid";
}

// Returns whether `format` is for accounting only: no storage holds it (kF16, kF32, kFP8).
inline bool IsAccountingOnly(Format format) {
  return format == Format::kF16 || format == Format::kF32 || format == Format::kFP8;
}

// Returns whether `format` stores int8 elements with scales (kInt8, kInt8Hadamard).
inline bool IsInt8(Format format) {
  return format == Format::kInt8 || format == Format::kInt8Hadamard;
}

// Returns whether `format` stores K rotated (kInt8Hadamard).
inline bool RotatesK(Format format) { return format == Format::kInt8Hadamard; }

// Returns the bytes of one element of `format` (int8: 1, its scales aside), or 0 for a
// value outside the enum.
inline uint64_t ElementBytes(Format format) {
  switch (format) {
    case Format::kBF16:
    case Format::kF16:
      return 2;
    case Format::kF32:
      return 4;
    case Format::kFP8:
    case Format::kInt8:
    case Format::kInt8Hadamard:
      return 1;
  }
  return 0;
}

// Returns the bytes one position of one kv_head takes in one stream (K or V) of
// `elements` elements: the elements, plus the scale of an int8 row. 0 for a value outside
// the enum.
inline uint64_t RowBytes(Format format, uint64_t elements) {
  return IsInt8(format) ? elements + 4 : ElementBytes(format) * elements;
}

}  // namespace kvring

#endif  // KVRING_FORMATS_FORMAT_H_
