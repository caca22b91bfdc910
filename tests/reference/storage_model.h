// A reference model of a KVCache and a driver of random operations against it, shared by
// the unit tests (random generator) and the libFuzzer target (fuzz bytes). The model keeps
// every layer's slots literally (which position each slot holds) and every position's rows,
// so that it predicts what must be held and what each call returns without the ring
// arithmetic under test.
#ifndef KVRING_TESTS_REFERENCE_STORAGE_MODEL_H_
#define KVRING_TESTS_REFERENCE_STORAGE_MODEL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvring/kvring.h"

namespace kvring {
namespace testing {

// What one position of one layer must read back: BF16 bits, or int8 elements and the bits of
// their scales ([kv_head]), as EncodeInt8Row gives them.
struct RowModel {
  std::vector<uint16_t> k, v;          // BF16 layers
  std::vector<int8_t> k_int8, v_int8;  // int8 layers
  std::vector<uint32_t> k_scales, v_scales;
};

// One owning layer as the model sees it.
struct LayerModel {
  uint64_t keep = 0;  // window - 1 of the widest reader; the context for global owners
  Format format = Format::kBF16;
  std::vector<std::optional<uint64_t>> slots;  // the position each slot holds
  // The rows last appended at each position (indexed by pos, up to the context).
  std::vector<RowModel> rows;
  uint64_t end = 0;

  bool Holds(uint64_t pos) const {
    return pos < end && !slots.empty() && slots[pos % slots.size()] == pos;
  }
  uint64_t NumHeld() const {
    uint64_t held = 0;
    for (uint64_t pos = end; pos-- > 0 && Holds(pos);) ++held;
    return held;
  }
  void Resize(size_t num_slots) {
    std::vector<std::optional<uint64_t>> resized(num_slots);
    for (const auto& pos : slots) {
      if (pos && Holds(*pos)) resized[*pos % num_slots] = *pos;
    }
    slots = std::move(resized);
  }
};

// Supplies choices: from a random generator (tests) or fuzz bytes (fuzzer).
class ChoiceSource {
 public:
  virtual ~ChoiceSource() = default;
  // Returns a value in [0, bound) (bound >= 1).
  virtual uint64_t Below(uint64_t bound) = 0;
  // Whether choices are exhausted (the fuzzer's input ran out).
  virtual bool Done() const { return false; }
  uint64_t Between(uint64_t lo, uint64_t hi) { return lo + Below(hi - lo + 1); }
};

// Choices from fuzz bytes: as many bytes as a bound needs, little-endian; zeros once the
// input runs out, when Done() turns true (the fuzz targets' source).
class ByteChoices : public ChoiceSource {
 public:
  ByteChoices(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint64_t Below(uint64_t bound) override {
    uint64_t value = 0;
    for (uint64_t range = 1; range < bound && range != 0; range <<= 8) {
      value = (value << 8) | (offset_ < size_ ? data_[offset_] : 0);
      ++offset_;
    }
    return value % bound;
  }
  bool Done() const override { return offset_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
};

// Drives random operations on a KVCache<Layout> and its model; Run() returns the first
// disagreement, or an empty string.
template <typename Layout>
class StorageDriver {
 public:
  // `dsa`: the last layer is always an MLA latent keeping a DSA indexer key.
  explicit StorageDriver(ChoiceSource* source, bool dsa = false) : source_(source), dsa_(dsa) {}

  // Plans a random model (a sliding owner, a consumer reading it with another window, a
  // global owner, sometimes an MLA latent, with or without a DSA indexer key; each owner BF16
  // or int8) and runs `num_steps` operations.
  std::string Run(size_t num_steps) {
    LayerPlan::Builder builder;
    // Head dims are multiples of 16, as the attention kernels (and so the plan) require.
    const uint32_t heads = static_cast<uint32_t>(source_->Between(1, 3));
    const uint32_t head_dim = 16 * static_cast<uint32_t>(source_->Between(1, 2));
    const uint64_t window = source_->Between(1, 90);
    const uint64_t consumer_window = source_->Between(1, 120);
    const auto format = [this] { return source_->Below(2) ? Format::kInt8 : Format::kBF16; };
    LayerSpec sliding = LayerSpec::Sliding(window, heads, head_dim);
    sliding.format = format();
    builder.AddLayer(sliding);
    builder.AddLayer(LayerSpec::Sliding(consumer_window, heads, head_dim).SharedFrom(0));
    LayerSpec global = LayerSpec::Global(heads, head_dim);
    global.v_head_dim = 16 * static_cast<uint32_t>(source_->Between(1, 2));
    global.format = format();
    builder.AddLayer(global);
    const bool chunked = !dsa_ && source_->Below(2) == 1;
    const uint64_t chunk = chunked ? source_->Between(1, 70) : 0;
    // A latent keeps a DSA indexer key of 0 (none), 16 or 32 elements beside it.
    LayerSpec last = chunked
                         ? LayerSpec::Chunked(chunk, 1, 16)
                         : LayerSpec::Latent(16 * static_cast<uint32_t>(source_->Between(1, 3)))
                               .WithIndexer(16 * static_cast<uint32_t>(dsa_ ? source_->Between(1, 2)
                                                                            : source_->Below(3)));
    last.format = format();
    builder.AddLayer(last);
    RuntimeSpec runtime;
    runtime.context = source_->Between(1, 400);
    // What each owner must keep before a new batch, worked out here from the specs: the
    // widest window of the sliding owner and its consumer, the chunk, or all (global).
    const uint64_t keeps[4] = {std::max(window, consumer_window) - 1, 0, runtime.context,
                               chunked ? chunk - 1 : runtime.context};
    runtime.batch = source_->Between(1, std::min<uint64_t>(runtime.context, 40));
    runtime.rollback = source_->Between(0, std::min<uint64_t>(runtime.context, 40));
    runtime.backend = Layout::kBackend;
    runtime.tile_rows = static_cast<uint32_t>(Layout::kSlotAlignment);
    Expected<LayerPlan> plan = builder.SetRuntime(runtime).Build();
    if (!plan.ok()) return "plan: " + plan.error().message;
    Expected<KVCache<Layout>> cache = KVCache<Layout>::Create(*plan);
    if (!cache.ok()) return "cache: " + cache.error().message;
    cache_ = std::move(cache).value();
    models_.assign(plan->NumLayers(), LayerModel());
    batch_ = runtime.batch;
    for (const LayerInfo& layer : plan->Layers()) {
      if (!layer.OwnsKV()) continue;
      models_[layer.index].keep = keeps[layer.index];
      models_[layer.index].format = layer.spec.format;
      models_[layer.index].slots.resize(ExpectedSlots(models_[layer.index]));
      models_[layer.index].rows.resize(runtime.context);
    }
    std::string failure = CheckSlots(cache_, models_, "after Create");
    if (failure.empty()) failure = Check(cache_, models_, "after Create");
    for (size_t step = 0; step < num_steps && failure.empty() && !source_->Done(); ++step) {
      failure = Step();
      if (failure.empty()) failure = Check(cache_, models_, "step " + std::to_string(step));
      if (failure.empty() && snapshot_ && (step % 8 == 0 || step + 1 == num_steps)) {
        failure = Check(*snapshot_, snapshot_models_, "snapshot at step " + std::to_string(step));
      }
    }
    return failure;
  }

  size_t num_appends() const { return num_appends_; }
  size_t num_wraps() const { return num_wraps_; }
  size_t num_int8_appends() const { return num_int8_appends_; }
  size_t num_indexer_appends() const { return num_indexer_appends_; }

 private:
  // One random operation on the cache and the model; returns a disagreement or "".
  std::string Step() {
    const uint64_t kind = source_->Below(100);
    const RuntimeSpec& runtime = cache_.Plan().Runtime();
    const uint64_t end = models_[0].end;
    if (kind < 60) {
      // Append the same batch to every owning layer, as an engine does token step by step;
      // sometimes larger than planned (growth), sometimes past the context.
      uint64_t num_tokens = source_->Between(1, runtime.batch);
      if (source_->Below(10) == 0) num_tokens = source_->Between(1, 3 * runtime.batch + 5);
      return AppendAll(end, num_tokens);
    }
    if (kind < 65) {
      // A wrong position, an empty batch, a consumer, null rows: refused, and nothing changes,
      // not even for batches larger than planned (which would otherwise grow the rings).
      const uint64_t wrong = end + 1 + source_->Below(3);
      const uint64_t num_tokens = source_->Below(2) ? 1 : runtime.batch + 1 + source_->Below(8);
      std::vector<float> k(num_tokens * 64), v(num_tokens * 64);
      const uint64_t bytes = cache_.AllocatedBytes(), batch = runtime.batch;
      const Status status = cache_.AppendF32(0, wrong, k.data(), v.data(), num_tokens);
      if (status != Status::kWrongPosition) {
        return "wrong position: " + std::string(ToString(status));
      }
      if (cache_.AppendF32(0, end, k.data(), v.data(), 0) != Status::kEmptyBatch) {
        return "empty batch was not refused";
      }
      if (cache_.AppendF32(1, end, k.data(), v.data(), num_tokens) != Status::kNotOwner) {
        return "a consumer append was not refused";
      }
      if (cache_.AppendF32(0, end, k.data(), nullptr, num_tokens) != Status::kBadArgument) {
        return "null V rows were not refused";
      }
      if (cache_.AppendF32(0, end, nullptr, v.data(), num_tokens) != Status::kBadArgument) {
        return "null K rows were not refused";
      }
      if (cache_.Grow(0) != Status::kBadArgument) return "Grow(0) was not refused";
      if (cache_.AllocatedBytes() != bytes || cache_.Plan().Runtime().batch != batch) {
        return "a refused call grew the cache";
      }
      return CheckSlots(cache_, models_, "after refused calls");
    }
    if (kind < 80) return RollbackAll(source_->Between(0, runtime.rollback + 3));
    if (kind < 85) {
      // Grow for a larger batch (rings keep every held position).
      const uint64_t batch = source_->Between(1, runtime.context + 2);
      const Status status = cache_.Grow(batch);
      if (batch > runtime.context) {
        if (status == Status::kBadArgument) return "";
        return "grow past the context: " + std::string(ToString(status));
      }
      if (status != Status::kOk) return "grow: " + std::string(ToString(status));
      batch_ = std::max(batch_, batch);
      return ResizeModels();
    }
    if (kind < 92) {
      // A snapshot, or a restore: continue on the snapshot, keep the live cache as the
      // snapshot (both must stay independent).
      if (snapshot_ && source_->Below(2)) {
        std::swap(*snapshot_, cache_);
        std::swap(snapshot_models_, models_);
        std::swap(snapshot_batch_, batch_);
        return "";
      }
      Expected<KVCache<Layout>> copy = cache_.Copy();
      if (!copy.ok()) return "copy: " + copy.error().message;
      snapshot_ = std::move(copy).value();
      snapshot_models_ = models_;
      snapshot_batch_ = batch_;
      return "";
    }
    if (kind < 95) {
      cache_.Clear();
      for (LayerModel& model : models_) {
        model.end = 0;
        std::fill(model.slots.begin(), model.slots.end(), std::nullopt);
      }
      return "";
    }
    // A rollback far past what is kept: refused.
    return RollbackAll(runtime.rollback + 1 + source_->Below(5));
  }

  std::string AppendAll(uint64_t pos, uint64_t num_tokens) {
    const uint64_t context = cache_.Plan().Runtime().context;
    for (size_t layer = 0; layer < models_.size(); ++layer) {
      if (!cache_.OwnsKV(layer)) continue;
      const KVShape shape = StoredView(cache_, layer).layout.Shape();
      // Rows: BF16 or f32 (rounded on the way in), fresh values every append.
      const bool as_bf16 = source_->Below(2) == 0;
      std::vector<float> k(num_tokens * shape.KRowElements());
      std::vector<float> v(num_tokens * shape.VRowElements());
      for (float& x : k) x = NextValue();
      for (float& x : v) x = NextValue();
      std::vector<BF16> k16(k.size()), v16(v.size());
      std::transform(k.begin(), k.end(), k16.begin(), BF16FromF32);
      std::transform(v.begin(), v.end(), v16.begin(), BF16FromF32);
      // Sometimes the rows lie apart in a larger buffer (a fused QKV row), the gaps holding
      // values that must never be stored.
      RowStrides strides;
      if (source_->Below(4) == 0) {
        strides.k = shape.KRowElements() + source_->Below(20);
        strides.v = shape.v_head_dim ? shape.VRowElements() + source_->Below(20) : 0;
      }
      const std::vector<float> k_rows = Spread(k, shape.KRowElements(), strides.k);
      const std::vector<float> v_rows = Spread(v, shape.VRowElements(), strides.v);
      const std::vector<BF16> k16_rows = Spread(k16, shape.KRowElements(), strides.k);
      const std::vector<BF16> v16_rows = Spread(v16, shape.VRowElements(), strides.v);
      const float* v_ptr = shape.v_head_dim ? v_rows.data() : nullptr;
      const BF16* v16_ptr = shape.v_head_dim ? v16_rows.data() : nullptr;
      const Status status =
          as_bf16 ? cache_.AppendBF16(layer, pos, k16_rows.data(), v16_ptr, num_tokens, strides)
                  : cache_.AppendF32(layer, pos, k_rows.data(), v_ptr, num_tokens, strides);
      LayerModel& model = models_[layer];
      if (pos + num_tokens > context) {
        if (status != Status::kContextFull) {
          return "append past the context: " + std::string(ToString(status));
        }
        continue;
      }
      if (status != Status::kOk) return "append: " + std::string(ToString(status));
      ++num_appends_;
      if (model.format == Format::kInt8) ++num_int8_appends_;
      if (cache_.Plan().Layer(layer).spec.indexer_dim != 0) ++num_indexer_appends_;
      batch_ = std::max(batch_, num_tokens);
      // Growth (for a batch larger than planned) happens on the first layer's append.
      std::string failure = ResizeModels();
      if (!failure.empty()) return failure;
      for (uint64_t i = 0; i < num_tokens; ++i) {
        const uint64_t p = pos + i;
        auto& slot = model.slots[p % model.slots.size()];
        if (slot && *slot < p) ++num_wraps_;
        slot = p;
        RowModel& row = model.rows[p];
        if (model.format == Format::kInt8) {
          // Encoded from the rows as appended: BF16 or f32.
          row = as_bf16 ? EncodeRow(k16.data() + i * shape.KRowElements(),
                                    v16.data() + i * shape.VRowElements(), shape)
                        : EncodeRow(k.data() + i * shape.KRowElements(),
                                    v.data() + i * shape.VRowElements(), shape);
          continue;
        }
        row.k.resize(shape.KRowElements());
        row.v.resize(shape.VRowElements());
        for (size_t e = 0; e < row.k.size(); ++e) row.k[e] = k16[i * shape.KRowElements() + e].bits;
        for (size_t e = 0; e < row.v.size(); ++e) row.v[e] = v16[i * shape.VRowElements() + e].bits;
      }
      model.end = pos + num_tokens;
      // The batch's first query (at pos) reads the keep positions before it; all of them and
      // the batch itself must be held now.
      for (uint64_t p = pos - std::min(pos, model.keep); p < model.end; ++p) {
        if (!model.Holds(p)) {
          return "layer " + std::to_string(layer) + " lost position " + std::to_string(p) +
                 " that the append at " + std::to_string(pos) + " still reads";
        }
      }
    }
    return "";
  }

  std::string RollbackAll(uint64_t num_tokens) {
    // The model's verdict: within the headroom, within what every layer holds, and every
    // layer still holding the positions its next query reads.
    bool allowed = num_tokens <= cache_.Plan().Runtime().rollback;
    for (const LayerModel& model : models_) {
      if (model.slots.empty()) continue;
      if (num_tokens > model.NumHeld()) {
        allowed = false;
        continue;
      }
      const uint64_t new_end = model.end - num_tokens;
      for (uint64_t pos = new_end - std::min(new_end, model.keep); pos < new_end; ++pos) {
        if (!model.Holds(pos)) allowed = false;
      }
    }
    const RollbackResult result = cache_.Rollback(num_tokens);
    if (result != (allowed ? Status::kOk : Status::kRollbackTooFar)) {
      return "rollback " + std::to_string(num_tokens) + ": " + result.Message() + ", expected " +
             (allowed ? "Ok" : "RollbackTooFar");
    }
    if (allowed) {
      for (LayerModel& model : models_) {
        if (!model.slots.empty()) model.end -= num_tokens;
      }
    }
    // Every owning layer appends every step, so all are at the first one's end.
    if (result.EndPos() != models_[0].end || cache_.EndPos() != models_[0].end) {
      return "rollback " + std::to_string(num_tokens) + ": the end " +
             std::to_string(result.EndPos()) + " differs from the model's " +
             std::to_string(models_[0].end);
    }
    return "";
  }

  // Returns the slots an owner must have for the batches seen so far, worked out here: its
  // capacity min(T, keep + max(B, R)) in whole tiles (an odd number of them for flash), never
  // fewer than it had.
  uint64_t ExpectedSlots(const LayerModel& model) const {
    const RuntimeSpec& runtime = cache_.Plan().Runtime();
    const uint64_t capacity =
        std::min(runtime.context, model.keep + std::max(batch_, runtime.rollback));
    uint64_t tiles = (capacity + Layout::kSlotAlignment - 1) / Layout::kSlotAlignment;
    if (Layout::kBackend == Backend::kFlash && tiles % 2 == 0) ++tiles;
    return std::max<uint64_t>(tiles * Layout::kSlotAlignment, model.slots.size());
  }

  // Checks that every owner has the slots the model expects.
  static std::string CheckSlots(const KVCache<Layout>& cache, const std::vector<LayerModel>& models,
                                const std::string& when) {
    for (size_t layer = 0; layer < models.size(); ++layer) {
      if (models[layer].slots.empty()) continue;
      if (cache.View(layer).NumSlots() != models[layer].slots.size()) {
        return when + ", layer " + std::to_string(layer) + ": " +
               std::to_string(cache.View(layer).NumSlots()) + " slots, expected " +
               std::to_string(models[layer].slots.size());
      }
    }
    return "";
  }

  // Follows the cache's rings after growth: remaps the model to the slots it expects, then
  // checks that the cache has them.
  std::string ResizeModels() {
    for (LayerModel& model : models_) {
      if (model.slots.empty()) continue;
      const uint64_t num_slots = ExpectedSlots(model);
      if (num_slots != model.slots.size()) model.Resize(num_slots);
    }
    return CheckSlots(cache_, models_, "after growth");
  }

  // Returns `rows` ([token][row_elements]) with each token's row `stride` elements after the
  // last (0: packed, `rows` as they are), the gaps filled with NaN bits.
  template <typename T>
  static std::vector<T> Spread(const std::vector<T>& rows, uint64_t row_elements, uint64_t stride) {
    if (stride == 0 || row_elements == 0) return rows;
    const uint64_t num_tokens = rows.size() / row_elements;
    T filler;
    if constexpr (std::is_same<T, BF16>::value) {
      filler.bits = 0x7FC3;
    } else {
      filler = std::numeric_limits<float>::quiet_NaN();
    }
    std::vector<T> spread(num_tokens * stride, filler);
    for (uint64_t t = 0; t < num_tokens; ++t) {
      std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(t * row_elements), row_elements,
                  spread.begin() + static_cast<std::ptrdiff_t>(t * stride));
    }
    return spread;
  }

  static uint32_t Bits(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    return bits;
  }

  // Returns the int8 row EncodeInt8Row makes of one position's K and V rows.
  template <typename T>
  static RowModel EncodeRow(const T* k, const T* v, const KVShape& shape) {
    RowModel row;
    row.k_int8.resize(shape.KRowElements());
    row.v_int8.resize(shape.VRowElements());
    for (uint32_t h = 0; h < shape.num_kv_heads; ++h) {
      row.k_scales.push_back(Bits(EncodeInt8Row(k + uint64_t{h} * shape.head_dim, shape.head_dim,
                                                row.k_int8.data() + uint64_t{h} * shape.head_dim)));
      if (shape.v_head_dim == 0) continue;
      row.v_scales.push_back(
          Bits(EncodeInt8Row(v + uint64_t{h} * shape.v_head_dim, shape.v_head_dim,
                             row.v_int8.data() + uint64_t{h} * shape.v_head_dim)));
    }
    return row;
  }

  // Returns the bytes of the owners of `cache`, worked out here from their shapes and formats:
  // num_slots x num_kv_heads x (RowBytes(format, head_dim) + RowBytes(format, v_head_dim)),
  // without the V term when there is no V.
  static uint64_t BytesInFormats(const KVCache<Layout>& cache,
                                 const std::vector<LayerModel>& models) {
    uint64_t bytes = 0;
    for (size_t layer = 0; layer < models.size(); ++layer) {
      if (models[layer].slots.empty()) continue;
      const KVShape shape = StoredView(cache, layer).layout.Shape();
      const Format format = models[layer].format;
      bytes += shape.num_slots * shape.num_kv_heads *
               (RowBytes(format, shape.head_dim) +
                (shape.v_head_dim != 0 ? RowBytes(format, shape.v_head_dim) : 0));
    }
    return bytes;
  }

  // One row's buffers for the reads Check makes, sized once per layer (a vector per read was
  // most of the sanitizer builds' time in these tests: their allocator records every call).
  struct RowReads {
    explicit RowReads(const KVShape& shape)
        : k(shape.KRowElements()),
          v(shape.VRowElements()),
          k_f32(k.size()),
          v_f32(v.size()),
          k_int8(k.size()),
          v_int8(v.size()),
          k_scales(shape.num_kv_heads),
          v_scales(shape.num_kv_heads) {}
    // Overwrites every buffer (bytes 0xA5), so that a read that writes less than it should
    // never passes on the row read before it.
    void Poison() {
      const auto fill = [](auto& buffer) {
        if (!buffer.empty()) std::memset(buffer.data(), 0xA5, buffer.size() * sizeof(buffer[0]));
      };
      fill(k);
      fill(v);
      fill(k_f32);
      fill(v_f32);
      fill(k_int8);
      fill(v_int8);
      fill(k_scales);
      fill(v_scales);
    }
    std::vector<BF16> k, v;
    std::vector<float> k_f32, v_f32;
    std::vector<int8_t> k_int8, v_int8;
    std::vector<float> k_scales, v_scales;
  };

  // Checks the int8 row of `pos` against `row`: ReadRowInt8, the view's bytes and scales, and
  // ReadRowF32 (their decoded values); ReadRow is refused. view, keys: StoredView and
  // IndexerKeys of `layer`; reads: buffers of its shape.
  static std::string CheckInt8Row(const KVCache<Layout>& cache, size_t layer,
                                  const KVView<Layout>& view, const IndexerKeysView& keys,
                                  uint64_t pos, const RowModel& row, RowReads& reads) {
    const KVShape shape = view.layout.Shape();
    if (view.format != Format::kInt8 || view.k != nullptr || view.v != nullptr ||
        view.HasV() != (shape.v_head_dim != 0)) {
      return "the view's format and pointers are not those of int8";
    }
    const std::vector<int8_t>& k = reads.k_int8;
    const std::vector<int8_t>& v = reads.v_int8;
    const std::vector<float>& k_scales = reads.k_scales;
    const std::vector<float>& v_scales = reads.v_scales;
    const std::vector<float>& k_f32 = reads.k_f32;
    const std::vector<float>& v_f32 = reads.v_f32;
    const bool has_v = shape.v_head_dim != 0;
    reads.Poison();
    if (cache.ReadRowInt8(layer, pos, reads.k_int8.data(), reads.k_scales.data(),
                          has_v ? reads.v_int8.data() : nullptr,
                          has_v ? reads.v_scales.data() : nullptr) != Status::kOk ||
        cache.ReadRowF32(layer, pos, reads.k_f32.data(), has_v ? reads.v_f32.data() : nullptr) !=
            Status::kOk) {
      return "int8 reads of " + std::to_string(pos) + " refused";
    }
    if (cache.ReadRow(layer, pos, reads.k.data(), nullptr) != Status::kBadArgument) {
      return "a BF16 read of an int8 layer was not refused";
    }
    const uint64_t slot = view.SlotOf(pos);
    for (uint32_t h = 0; h < shape.num_kv_heads; ++h) {
      if (Bits(k_scales[h]) != row.k_scales[h] ||
          Bits(view.k_scales[view.ScaleOffset(slot, h)]) != row.k_scales[h]) {
        return "K scale of pos " + std::to_string(pos) + " differs";
      }
      float k_scale;
      std::memcpy(&k_scale, &row.k_scales[h], sizeof(k_scale));
      for (uint32_t d = 0; d < shape.head_dim; ++d) {
        const size_t e = size_t{h} * shape.head_dim + d;
        if (k[e] != row.k_int8[e] || view.k_int8[view.layout.K()(slot, h, d)] != row.k_int8[e] ||
            Bits(k_f32[e]) != Bits(DecodeInt8(k_scale, row.k_int8[e]))) {
          return "K of pos " + std::to_string(pos) + " differs";
        }
      }
      if (!has_v) continue;
      if (Bits(v_scales[h]) != row.v_scales[h] ||
          Bits(view.v_scales[view.ScaleOffset(slot, h)]) != row.v_scales[h]) {
        return "V scale of pos " + std::to_string(pos) + " differs";
      }
      float v_scale;
      std::memcpy(&v_scale, &row.v_scales[h], sizeof(v_scale));
      for (uint32_t d = 0; d < shape.v_head_dim; ++d) {
        const size_t e = size_t{h} * shape.v_head_dim + d;
        if (v[e] != row.v_int8[e] || view.v_int8[view.layout.V()(slot, h, d)] != row.v_int8[e] ||
            Bits(v_f32[e]) != Bits(DecodeInt8(v_scale, row.v_int8[e])) ||
            (keys.dim != 0 &&
             (keys.RowInt8(pos)[d] != row.v_int8[e] || Bits(keys.Scale(pos)) != row.v_scales[h]))) {
          return "V (or indexer key) of pos " + std::to_string(pos) + " differs";
        }
      }
    }
    return "";
  }

  // Returns the view of `layer` as its storage holds it: a DSA latent's indexer keys as its V
  // stream (View leaves them out, IndexerKeys reads them; the checks compare both).
  static KVView<Layout> StoredView(const KVCache<Layout>& cache, size_t layer) {
    KVView<Layout> view = cache.View(layer);
    const IndexerKeysView keys = cache.IndexerKeys(layer);
    if (keys.dim == 0) return view;
    KVShape shape = view.layout.Shape();
    shape.v_head_dim = keys.dim;
    view.layout = Layout(shape);
    view.v = keys.keys;
    view.v_int8 = keys.keys_int8;
    view.v_scales = keys.scales;
    return view;
  }

  float NextValue() {
    // Mostly ordinary values; some that round, ties, and the odd NaN or infinity.
    const uint64_t kind = source_->Below(64);
    if (kind == 0) return std::numeric_limits<float>::quiet_NaN();
    if (kind == 1) return -std::numeric_limits<float>::infinity();
    const uint32_t bits = static_cast<uint32_t>(source_->Below(uint64_t{1} << 32));
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    if (kind < 8 || value != value)
      return static_cast<float>(static_cast<int>(bits % 2001) - 1000) / 7.0f;
    return value;
  }

  // Checks every held position of every layer against the model, through ReadRow and
  // through the layer's view; and that the next query's visible positions are all held.
  static std::string Check(const KVCache<Layout>& cache, const std::vector<LayerModel>& models,
                           const std::string& when) {
    for (size_t layer = 0; layer < models.size(); ++layer) {
      const size_t owner = cache.Owner(layer);
      const LayerModel& model = models[owner];
      const KVView<Layout> view = StoredView(cache, layer);
      const IndexerKeysView keys = cache.IndexerKeys(layer);
      const std::string where = when + ", layer " + std::to_string(layer) + ": ";
      if (cache.View(layer).HasV() && keys.dim != 0) {
        return where + "attention's view holds the indexer keys";
      }
      if (keys.dim != 0 && (keys.first_pos != view.first_pos || keys.end_pos != view.end_pos)) {
        return where + "the indexer keys' range differs from the latent's";
      }
      if (cache.EndPos(layer) != model.end) return where + "EndPos differs";
      const uint64_t first = model.end - model.NumHeld();
      if (cache.FirstPos(layer) != first || view.first_pos != first || view.end_pos != model.end) {
        return where + "live range [" + std::to_string(cache.FirstPos(layer)) + ", " +
               std::to_string(model.end) + ") differs from the model's first " +
               std::to_string(first);
      }
      // Every position the next query (at EndPos) sees under this layer's own rule is held.
      if (model.end > 0 && view.visibility.FirstVisible(model.end) < first) {
        return where + "the next query's window is not held";
      }
      const KVShape shape = view.layout.Shape();
      RowReads reads(shape);
      std::vector<BF16>& k = reads.k;
      std::vector<BF16>& v = reads.v;
      std::vector<float>& k_f32 = reads.k_f32;
      std::vector<float>& v_f32 = reads.v_f32;
      for (uint64_t pos = first; pos < model.end; ++pos) {
        const RowModel& row = model.rows[pos];
        if (model.format == Format::kInt8) {
          const std::string failure = CheckInt8Row(cache, layer, view, keys, pos, row, reads);
          if (!failure.empty()) return where + failure;
          continue;
        }
        reads.Poison();
        if (cache.ReadRowF32(layer, pos, k_f32.data(), v.empty() ? nullptr : v_f32.data()) !=
            Status::kOk) {
          return where + "ReadRowF32(" + std::to_string(pos) + ") refused";
        }
        for (size_t e = 0; e < k.size(); ++e) {
          if (Bits(k_f32[e]) != Bits(BF16ToF32(BF16{row.k[e]}))) {
            return where + "K of pos " + std::to_string(pos) + " widens differently";
          }
        }
        for (size_t e = 0; e < v.size(); ++e) {
          if (Bits(v_f32[e]) != Bits(BF16ToF32(BF16{row.v[e]}))) {
            return where + "V of pos " + std::to_string(pos) + " widens differently";
          }
        }
        if (cache.ReadRow(layer, pos, k.data(), v.empty() ? nullptr : v.data()) != Status::kOk) {
          return where + "ReadRow(" + std::to_string(pos) + ") refused";
        }
        const uint64_t slot = view.SlotOf(pos);
        for (uint32_t h = 0; h < shape.num_kv_heads; ++h) {
          for (uint32_t d = 0; d < shape.head_dim; ++d) {
            const size_t e = size_t{h} * shape.head_dim + d;
            if (k[e].bits != row.k[e] || view.k[view.layout.K()(slot, h, d)].bits != row.k[e]) {
              return where + "K of pos " + std::to_string(pos) + " differs";
            }
          }
          for (uint32_t d = 0; d < shape.v_head_dim; ++d) {
            const size_t e = size_t{h} * shape.v_head_dim + d;
            if (v[e].bits != row.v[e] || view.v[view.layout.V()(slot, h, d)].bits != row.v[e] ||
                (keys.dim != 0 && keys.Row(pos)[d].bits != row.v[e])) {
              return where + "V (or indexer key) of pos " + std::to_string(pos) + " differs";
            }
          }
        }
      }
      if (model.end > first && first > 0 &&
          cache.ReadRowF32(layer, first - 1, k_f32.data(), nullptr) != Status::kNotLive) {
        return where + "a position before the live range reads back";
      }
      if (cache.ReadRowF32(layer, model.end, k_f32.data(), nullptr) != Status::kNotLive) {
        return where + "the end position reads back";
      }
    }
    if (cache.AllocatedBytes() != BytesInFormats(cache, models)) {
      return when + ": allocated bytes differ from the bytes of the layers' formats";
    }
    // Property 6: every layer's buffers, int8 elements and scales included, are the plan's.
    if (cache.AllocatedBytes() != cache.Plan().TotalBytes()) {
      return when + ": allocated bytes differ from the plan";
    }
    return "";
  }

  ChoiceSource* source_;
  bool dsa_ = false;
  uint64_t batch_ = 0;           // the largest batch planned or appended so far
  uint64_t snapshot_batch_ = 0;  // the same, for the snapshot
  KVCache<Layout> cache_;
  std::vector<LayerModel> models_;
  std::optional<KVCache<Layout>> snapshot_;
  std::vector<LayerModel> snapshot_models_;
  size_t num_appends_ = 0;
  size_t num_wraps_ = 0;
  size_t num_int8_appends_ = 0;
  size_t num_indexer_appends_ = 0;  // into DSA latents (indexer keys as v)
};

}  // namespace testing
}  // namespace kvring

#endif  // KVRING_TESTS_REFERENCE_STORAGE_MODEL_H_
