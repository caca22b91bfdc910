// kvring/kernel_limits.h: the head dimensions the attention kernels serve. The plan refuses
// others (plan/validation.h), the checked entry points refuse views of others (attention.h).
#ifndef KVRING_KERNEL_LIMITS_H_
#define KVRING_KERNEL_LIMITS_H_

#include <cstdint>

namespace kvring {

// Largest head_dim, v_head_dim and MLA latent_dim the attention kernels take (DeepSeek's MLA
// latent is 576). A plan refuses larger ones.
inline constexpr uint32_t kMaxAttentionHeadDim = 576;
// head_dim, v_head_dim and latent_dim must be multiples of this (the kernels split a head
// into 16-element pieces). A plan refuses others.
inline constexpr uint32_t kAttentionDimMultiple = 16;

// Returns whether the attention kernels serve a head dimension of `dim` elements: a positive
// multiple of kAttentionDimMultiple, at most kMaxAttentionHeadDim.
inline bool IsAttentionDim(uint64_t dim) {
  return dim != 0 && dim % kAttentionDimMultiple == 0 && dim <= kMaxAttentionHeadDim;
}

}  // namespace kvring

#endif  // KVRING_KERNEL_LIMITS_H_
