// kvring/formats/format.h: how one K or V element of a layer is stored, chosen per layer in
// the plan: BF16, or symmetric int8 with one f32 scale per (pos, kv_head) of K and of V
// (kvring/formats/int8.h). Names and byte counts only; no storage, no vector code.
#ifndef KVRING_FORMATS_FORMAT_H_
#define KVRING_FORMATS_FORMAT_H_

#include <cstdint>

namespace kvring {

enum class Format : uint8_t {
  kBF16,  // 2 bytes an element, written from f32 with round to nearest even
  kInt8,  // 1 byte an element, plus a 4-byte f32 scale per (pos, kv_head) and stream
};

// Returns the format's name as kvring-plan prints it ("bf16", "int8"), or "invalid".
inline const char* ToString(Format format) {
  switch (format) {
    case Format::kBF16:
      return "bf16";
    case Format::kInt8:
      return "int8";
  }
  return "invalid";
}

// Returns the bytes one position of one kv_head takes in one stream (K or V) of
// `elements` elements: the elements, plus the scale of an int8 row. 0 for an invalid format.
inline uint64_t RowBytes(Format format, uint64_t elements) {
  switch (format) {
    case Format::kBF16:
      return 2 * elements;
    case Format::kInt8:
      return elements + 4;
  }
  return 0;
}

}  // namespace kvring

#endif  // KVRING_FORMATS_FORMAT_H_
