// kvring/ops/append-inl.h: the former name of kvring/ops/bf16_convert-inl.h (F32ToBF16, the
// vectorised f32 -> BF16 conversion), kept so that code including it still builds. Per-target
// code like the header it names: no include guard of its own (the toggle is there).
#include "kvring/ops/bf16_convert-inl.h"
