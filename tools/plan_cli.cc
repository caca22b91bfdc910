// tools/plan_cli.cc: argument parsing and reports of kvring-plan.
#include "plan_cli.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kvring/hf_config.h"
#include "kvring/layer_plan.h"
#include "kvring/layouts/flash_layout.h"
#include "kvring/layouts/tiled_layout.h"
#include "kvring/model_presets.h"
#include "kvring/storage/kv_pool.h"

namespace kvring {
namespace tools {
namespace {

constexpr const char* kDefaultPreset = "gemma-3-27b";
constexpr uint64_t kDefaultBatch = 512;

constexpr const char* kUsage =
    R"(Usage: kvring-plan [options]
Prints the per-layer KV cache plan of a model: what each layer must hold (sliding layers keep
window - 1 + max(batch, rollback) slots, global layers the whole context) and what it costs.

Model (one of):
  --preset NAME        a built-in model (default gemma-3-27b); --list-presets lists them
  --config PATH        a Hugging Face config.json, read as transformers reads it (families
                       and keys understood: docs/configs.md)
  --list-presets       print the preset names with their layer counts and contexts
  --mla FORM           how a --config file's MLA layers are planned: latent (default: the
                       latent and RoPE key per position, as serving engines store them) or
                       expanded (per query head K and V, as transformers' own cache holds)
Runtime:
  --context N          context in tokens (default: the model's maximum, for --config the
                       file's max_position_embeddings)
  --batch N            largest append batch (default 512, capped by the context)
  --rollback N         rollback headroom in tokens (default 0)
  --stage-states       one more copy of each recurrent state, so that an abandoned step
                       leaves a hybrid model's sequence whole at any step length
  --sequences N        number of sequences (default 1)
  --backend B          flash or tiled (default flash)
  --tile-rows N        tile height of the tiled backend: 8, 16, 32 or 64 (default 16)
  --dtype T            how K and V are stored (default bf16): bf16, or int8 (one byte an
                       element plus a 4-byte scale per position and KV head, K and V), or
                       int8h (int8 bytes, K rotated per head before it is stored: for K with
                       outlier channels; not for MLA latents); or a format per attention
                       kind, as global=int8,sliding=bf16 (kinds global, sliding, chunked;
                       formats bf16, int8, int8h; kinds left out stay bf16); or
                       f16, f32, fp8: element sizes for what-if accounting, no scales
  --tensor-parallel N  plan one rank of N: KV heads split across the ranks (refused when they
                       do not divide; one replicated head per rank when fewer than N); MLA
                       latents replicated (default 1)
Capacity report (given --memory):
  --memory BYTES       device memory
  --weights BYTES      model weights (default 0)
  --workspace BYTES    activations and scratch (default 0)
  --margin BYTES       memory kept free (default 0)
Pool report (given --memory): how many sequences a KVPool admits in the usable memory,
against one KVCache per sequence, and a sequence's ring memory against vLLM's rule
  --pool               add the pool report
  --lengths LIST       the sequence lengths, as length:fraction pairs whose fractions sum to
                       1: 512:0.5,4096:0.3,32k:0.2
  --mean-length N      every sequence N tokens long (the list N:1)
  --block-slots N      positions per block of the pool's paged (global) layers: a multiple of
                       the tile (default: the layout's, 160 for flash, 256 for tiled)
Output:
  --sweep              bytes of the kvring plan and of a flat cache (in the same formats) at
                       contexts 1024, 2048, ... up to the context, one CSV line each
                       (columns: docs/planning.md)
  --sweep-step N       sweep the contexts N, 2N, ... up to the context instead
  --json               one JSON object instead of the table or CSV (schema: docs/planning.md)
  --help               this text

Numbers take suffixes: k, m, g, t are powers of 1024 (128k = 131072); KiB, MiB, GiB, TiB too;
KB, MB, GB, TB are powers of 1000.
)";

// A share of the sequences that are `length` tokens long.
struct LengthShare {
  uint64_t length = 0;
  double fraction = 0;
};

struct Options {
  std::string preset = kDefaultPreset;
  bool has_preset = false;
  std::string config;  // empty: a preset
  HfReadOptions read;  // --mla
  bool has_context = false, has_batch = false;
  uint64_t tensor_parallel = 1;
  bool sweep = false;
  uint64_t sweep_step = 0;  // 0: doubling
  RuntimeSpec runtime;
  // --dtype KIND=FORMAT,...: the format of each kind named (AttentionKind order).
  std::optional<kvring::Format> kind_formats[3];
  std::string dtype = "bf16";  // --dtype as the reports print it
  bool has_memory = false;
  MemoryBudget budget;
  // --pool: the pool report, for the lengths of --lengths or --mean-length.
  bool pool = false;
  std::vector<LengthShare> lengths;
  std::string lengths_option;  // "--lengths" or "--mean-length" (which gave them), or ""
  std::string lengths_text;    // the value as given
  uint64_t block_slots = 0;    // --block-slots; 0: the layout's DefaultBlockSlots()
  bool json = false;
  bool list_presets = false;
  bool help = false;
};

std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return buffer;
}

constexpr AttentionKind kKinds[] = {AttentionKind::kGlobal, AttentionKind::kSliding,
                                    AttentionKind::kChunked};

// Sets options->kind_formats (and the runtime's element type to bf16, which counts the
// layers' formats) from a --dtype list "global=int8,sliding=bf16", or returns an error line.
std::string ParseKindFormats(const std::string& list, Options* options) {
  const std::string option = "option --dtype: '" + list + "'";
  for (auto& format : options->kind_formats) format.reset();
  options->runtime.element_type = kvring::Format::kBF16;
  size_t start = 0;
  while (true) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string part = list.substr(start, comma - start);
    const size_t equals = part.find('=');
    if (equals == std::string::npos) {
      return option + ": '" + part + "' is not kind=format (as global=int8,sliding=bf16)";
    }
    const std::string kind_name = part.substr(0, equals);
    const std::string format_name = part.substr(equals + 1);
    std::optional<size_t> kind;
    for (AttentionKind k : kKinds) {
      if (kind_name == ToString(k)) kind = static_cast<size_t>(k);
    }
    if (!kind) {
      return option + ": '" + kind_name + "' is not an attention kind (global, sliding, chunked)";
    }
    std::optional<kvring::Format> format;
    for (kvring::Format f :
         {kvring::Format::kBF16, kvring::Format::kInt8, kvring::Format::kInt8Hadamard}) {
      if (format_name == ToString(f)) format = f;
    }
    if (!format) return option + ": '" + format_name + "' is not a format (bf16, int8, int8h)";
    if (options->kind_formats[*kind]) return option + ": names " + kind_name + " twice";
    options->kind_formats[*kind] = format;
    if (comma == list.size()) break;
    start = comma + 1;
  }
  options->dtype.clear();
  for (AttentionKind k : kKinds) {
    const auto& format = options->kind_formats[static_cast<size_t>(k)];
    if (!format) continue;
    options->dtype +=
        std::string(options->dtype.empty() ? "" : ",") + ToString(k) + "=" + ToString(*format);
  }
  return "";
}

// Sets *lengths from a --lengths list "512:0.5,4096:0.3,32k:0.2" (each length a count as
// ParseSize reads it, each fraction a decimal in (0, 1], the fractions summing to 1), or returns
// an error line.
std::string ParseLengths(const std::string& list, std::vector<LengthShare>* lengths) {
  const std::string option = "option --lengths: '" + list + "'";
  lengths->clear();
  double sum = 0;
  size_t start = 0;
  while (true) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string part = list.substr(start, comma - start);
    const size_t colon = part.find(':');
    if (colon == std::string::npos) {
      return option + ": '" + part + "' is not length:fraction (as 512:0.5,4096:0.3,32k:0.2)";
    }
    const std::string length_text = part.substr(0, colon);
    const std::string fraction_text = part.substr(colon + 1);
    LengthShare share;
    if (!ParseSize(length_text, &share.length)) {
      return option + ": '" + length_text + "' is not a length (examples: 512, 32k)";
    }
    if (share.length == 0) return option + ": a length of 0 is invalid: one token at least";
    char* end = nullptr;
    share.fraction = fraction_text.empty() ? 0 : std::strtod(fraction_text.c_str(), &end);
    if (fraction_text.empty() || *end != '\0' || !std::isfinite(share.fraction) ||
        share.fraction <= 0 || share.fraction > 1) {
      return option + ": '" + fraction_text + "' is not a fraction in (0, 1]";
    }
    sum += share.fraction;
    lengths->push_back(share);
    if (comma == list.size()) break;
    start = comma + 1;
  }
  if (std::fabs(sum - 1) > 1e-6) {
    return option + Format(": the fractions sum to %g, not 1", sum);
  }
  return "";
}

// Fills *options from args, or returns an error line.
std::string ParseArgs(const std::vector<std::string>& args, Options* options) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_value = false;
    const size_t equals = name.find('=');
    if (name.rfind("--", 0) == 0 && equals != std::string::npos) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
      has_value = true;
    }
    const auto flag = [&](bool* target) -> std::string {
      if (has_value) return "option " + name + " takes no value";
      *target = true;
      return "";
    };
    const auto text = [&](std::string* target) -> std::string {
      if (!has_value) {
        if (i + 1 >= args.size()) return "option " + name + " needs a value";
        value = args[++i];
      }
      *target = value;
      return "";
    };
    const auto size = [&](uint64_t* target) -> std::string {
      std::string raw;
      std::string error = text(&raw);
      if (!error.empty()) return error;
      if (!ParseSize(raw, target)) {
        return "option " + name + ": '" + raw + "' is not a number (examples: 131072, 128k, 24GiB)";
      }
      return "";
    };
    std::string error;
    if (name == "--help" || name == "-h") {
      error = flag(&options->help);
    } else if (name == "--json") {
      error = flag(&options->json);
    } else if (name == "--list-presets") {
      error = flag(&options->list_presets);
    } else if (name == "--preset") {
      error = text(&options->preset);
      options->has_preset = true;
    } else if (name == "--config") {
      error = text(&options->config);
      if (error.empty() && options->config.empty()) error = "option --config: the path is empty";
    } else if (name == "--tensor-parallel") {
      error = size(&options->tensor_parallel);
      if (error.empty() && options->tensor_parallel == 0) {
        error = "option --tensor-parallel: 0 is invalid: one rank at least";
      }
    } else if (name == "--sweep") {
      error = flag(&options->sweep);
    } else if (name == "--sweep-step") {
      error = size(&options->sweep_step);
      if (error.empty() && options->sweep_step == 0) {
        error = "option --sweep-step: 0 is invalid: the step must be at least 1";
      }
      options->sweep = true;
    } else if (name == "--context") {
      error = size(&options->runtime.context);
      options->has_context = true;
    } else if (name == "--batch") {
      error = size(&options->runtime.batch);
      options->has_batch = true;
    } else if (name == "--rollback") {
      error = size(&options->runtime.rollback);
    } else if (name == "--stage-states") {
      error = flag(&options->runtime.stage_states);
    } else if (name == "--sequences") {
      error = size(&options->runtime.num_sequences);
    } else if (name == "--tile-rows") {
      uint64_t rows = 0;
      error = size(&rows);
      if (error.empty() && (rows < kMinTileRows || rows > kMaxTileRows || (rows & (rows - 1)))) {
        error = "option --tile-rows: " + std::to_string(rows) + " is not 8, 16, 32 or 64";
      }
      options->runtime.tile_rows = static_cast<uint32_t>(rows);
    } else if (name == "--mla") {
      std::string form;
      error = text(&form);
      if (form == "latent") {
        options->read.mla = MlaCache::kLatent;
      } else if (form == "expanded") {
        options->read.mla = MlaCache::kExpanded;
      } else if (error.empty()) {
        error = "option --mla: '" + form + "' is not latent or expanded";
      }
    } else if (name == "--backend") {
      std::string backend;
      error = text(&backend);
      if (backend == "flash") {
        options->runtime.backend = Backend::kFlash;
      } else if (backend == "tiled") {
        options->runtime.backend = Backend::kTiled;
      } else if (error.empty()) {
        error = "option --backend: '" + backend + "' is not flash or tiled";
      }
    } else if (name == "--dtype") {
      std::string dtype;
      error = text(&dtype);
      bool found = false;
      for (kvring::Format type :
           {kvring::Format::kBF16, kvring::Format::kF16, kvring::Format::kF32, kvring::Format::kFP8,
            kvring::Format::kInt8, kvring::Format::kInt8Hadamard}) {
        if (dtype == ToString(type)) {
          options->runtime.element_type = type;
          for (auto& format : options->kind_formats) format.reset();
          options->dtype = dtype;
          found = true;
        }
      }
      if (error.empty() && !found) {
        if (dtype.find('=') != std::string::npos) {
          error = ParseKindFormats(dtype, options);
        } else {
          error = "option --dtype: '" + dtype +
                  "' is not bf16, f16, f32, fp8, int8, int8h or a list as "
                  "global=int8,sliding=bf16";
        }
      }
    } else if (name == "--memory") {
      error = size(&options->budget.device_bytes);
      options->has_memory = true;
    } else if (name == "--weights") {
      error = size(&options->budget.weight_bytes);
    } else if (name == "--workspace") {
      error = size(&options->budget.workspace_bytes);
    } else if (name == "--margin") {
      error = size(&options->budget.margin_bytes);
    } else if (name == "--pool") {
      error = flag(&options->pool);
    } else if (name == "--lengths" || name == "--mean-length") {
      if (!options->lengths_option.empty() && options->lengths_option != name) {
        return "options --lengths and --mean-length both give the lengths; give one";
      }
      options->lengths_option = name;
      if (name == "--lengths") {
        error = text(&options->lengths_text);
        if (error.empty()) error = ParseLengths(options->lengths_text, &options->lengths);
      } else {
        uint64_t length = 0;
        error = size(&length);
        options->lengths_text = value;
        if (error.empty() && length == 0) {
          error = "option --mean-length: 0 is invalid: one token at least";
        }
        options->lengths = {LengthShare{length, 1.0}};
      }
    } else if (name == "--block-slots") {
      error = size(&options->block_slots);
      if (error.empty() && options->block_slots == 0) {
        error = "option --block-slots: 0 is invalid: a block holds one tile at least";
      }
    } else {
      error = "unknown option '" + args[i] + "' (see --help)";
    }
    if (!error.empty()) return error;
  }
  if (options->has_preset && !options->config.empty()) {
    return "options --preset and --config both name the model; give one";
  }
  if (options->sweep && options->has_memory) {
    return "option --memory makes a capacity report, which --sweep does not print; drop one";
  }
  if (!options->pool) {
    if (!options->lengths_option.empty()) {
      return "option " + options->lengths_option + " is for the pool report; add --pool";
    }
    if (options->block_slots != 0) return "option --block-slots is for the pool report; add --pool";
  } else {
    if (!options->has_memory) {
      return "option --pool needs --memory: the budget the pool and the KVCaches share";
    }
    if (options->lengths.empty()) {
      return "option --pool needs the lengths: --lengths LEN:FRACTION,... or --mean-length N";
    }
  }
  return "";
}

std::string WithSeparators(uint64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(static_cast<size_t>(i), ",");
  }
  return digits;
}

std::string SpanText(const LayerSpec& spec) {
  switch (spec.kind) {
    case AttentionKind::kSliding:
      return std::to_string(spec.window);
    case AttentionKind::kChunked:
      return "chunk " + std::to_string(spec.chunk);
    case AttentionKind::kGlobal:
      break;
  }
  return "-";
}

std::string ShapeText(const LayerSpec& spec) {
  if (spec.IsLatent()) return "latent " + std::to_string(spec.latent_dim);
  std::string shape = std::to_string(spec.num_kv_heads) + " x " + std::to_string(spec.head_dim);
  if (spec.VHeadDim() != spec.head_dim) shape += "/" + std::to_string(spec.VHeadDim());
  return shape;
}

// Returns the name of what a layer's bytes count: its format (a consumer's is its owner's), or
// the accounting-only element type that replaces every format.
const char* FormatText(const LayerPlan& plan, const LayerInfo& layer) {
  const kvring::Format type = plan.Runtime().element_type;
  return IsAccountingOnly(type) ? ToString(type) : ToString(layer.spec.format);
}

const char* KindText(const LayerSpec& spec) {
  return LayerKindName(spec.kind, spec.attends, spec.HasState());
}

// The cells of a layer's table row, apart from its index range; a plan with recurrent states
// has a last column of each layer's state bytes (rollback copies included).
std::vector<std::string> RowCells(const LayerPlan& plan, const LayerInfo& layer) {
  std::vector<std::string> cells;
  if (layer.spec.attends) {
    cells = {KindText(layer.spec),
             SpanText(layer.spec),
             layer.OwnsKV() ? "self" : "layer " + std::to_string(layer.owner),
             ShapeText(layer.spec),
             layer.OwnsKV() ? std::to_string(layer.capacity) : "-",
             layer.OwnsKV() ? std::to_string(layer.num_slots) : "-",
             layer.OwnsKV() ? FormatBytes(layer.bytes) : "0 (shared)",
             FormatText(plan, layer)};
  } else {
    cells = {KindText(layer.spec), "-", "-", "-", "-", "-", "0 (no K/V)", "-"};
  }
  if (plan.HasStateLayers())
    cells.push_back(layer.HasState() ? FormatBytes(layer.state_bytes) : "-");
  return cells;
}

// The model being planned: a preset, or a config.json that hf_config read.
struct Model {
  std::string name;  // the preset's name, or the config file's path
  uint64_t max_context = 0;
  std::vector<LayerSpec> layers;     // one rank's, under --tensor-parallel
  uint32_t num_attention_heads = 0;  // 0 when unknown (presets)
  std::optional<HfModel> config;
};

// The report's line on DSA indexer keys (DeepSeek V3.2, GLM-5), empty without any.
std::string IndexerLine(const LayerPlan& plan) {
  size_t layers = 0;
  uint64_t bytes = 0, slot = 0;
  bool expanded = false;  // beside per-head K/V, which kvring's storage refuses
  for (const LayerInfo& layer : plan.Layers()) {
    if (layer.indexer_slot_bytes == 0) continue;
    ++layers;
    slot = layer.indexer_slot_bytes;
    bytes += layer.num_slots * layer.indexer_slot_bytes;  // below the layer's bytes
    expanded = expanded || !layer.spec.IsLatent();
  }
  if (layers == 0) return "";
  return Format("DSA indexer keys: %zu layers, %" PRIu64
                " bytes a position each, counted in their slots (%s per sequence; %s)\n",
                layers, slot, FormatBytes(bytes).c_str(),
                expanded ? "kvring's storage keeps them beside MLA latents only: --mla latent"
                         : "stored beside each latent");
}

bool HasStates(const std::vector<LayerSpec>& layers) {
  return std::any_of(layers.begin(), layers.end(),
                     [](const LayerSpec& spec) { return spec.HasState(); });
}

// The lines under the report's first line that say where the layers came from.
std::string SourceLines(const Model& model, const Options& options) {
  std::string out;
  if (model.config) {
    out += "read as model_type " + model.config->model_type + " (transformers' " +
           model.config->class_name + ")\n";
    if (!model.config->defaults.empty()) {
      std::string list;
      for (const HfDefault& entry : model.config->defaults) {
        list += (list.empty() ? "" : ", ") + entry.key + " = " + entry.value;
      }
      out += "class defaults for keys the file leaves out: " + list + "\n";
    }
  }
  if (options.tensor_parallel > 1) {
    out += Format("tensor parallel: one rank of %" PRIu64
                  "; KV heads split across the ranks, MLA latents replicated%s\n",
                  options.tensor_parallel,
                  model.config && HasStates(model.layers)
                      ? ", recurrent states split by heads as vLLM splits them"
                      : "");
  }
  return out;
}

// Returns the rows as aligned columns, two spaces apart, each line indented by `indent`: the
// columns `right` says align right (numbers), the others left; trailing blanks trimmed.
std::string TableText(const std::vector<std::vector<std::string>>& rows,
                      const std::vector<bool>& right, const std::string& indent) {
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(widths[c] - row[c].size(), ' ');
      line += (c ? "  " : "") + (right[c] ? pad + row[c] : row[c] + pad);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

// What one sequence of a KVPool of the plan takes, from the pool's own functions: a pool is
// created and asked (RingBytesFor, BlockBytesFor, IsPaged).
struct PoolFigures {
  std::string layout;                        // "FlashLayout", "TiledLayout<16>"
  uint64_t block_slots = 0;                  // positions per block
  uint64_t block_bytes = 0;                  // one block of every paged layer: BlockBytesFor(1)
  uint64_t decode_ring_bytes = 0;            // a sequence's rings for batch 1: RingBytesFor(1)
  uint64_t prefill_ring_bytes = 0;           // for the plan's batch: RingBytesFor(batch)
  uint64_t state_bytes = 0;                  // a hybrid model's recurrent states: StateBytes()
  std::vector<uint64_t> length_block_bytes;  // per length: BlockBytesFor(length)
  std::vector<size_t> ring_layers;           // owners with a ring per sequence
  std::vector<size_t> paged_layers;          // owners paged in blocks
};

// KVPool::Create reserves the block stores of the budget it is given (calloc: committed only
// as blocks are written) and refuses a budget that holds no sequence. The probe starts small
// and doubles until the pool holds one sequence's decode rings and one block, so that it
// reserves at most twice that.
constexpr uint64_t kProbeBudget = 4ull << 20;
constexpr uint64_t kMaxProbeBudget = 1ull << 50;

template <typename Layout>
Expected<PoolFigures> PoolFiguresOf(const LayerPlan& plan, uint64_t block_slots,
                                    const std::vector<LengthShare>& lengths, const char* layout) {
  PoolSpec spec;
  spec.budget_bytes = kProbeBudget;
  spec.max_sequences = 1;
  spec.block_slots = block_slots;
  Expected<KVPool<Layout>> pool = KVPool<Layout>::Create(plan, spec);
  while (!pool.ok() && pool.error().field == "budget_bytes" &&
         spec.budget_bytes < kMaxProbeBudget) {
    spec.budget_bytes *= 2;
    pool = KVPool<Layout>::Create(plan, spec);
  }
  if (!pool.ok()) return pool.error();
  PoolFigures figures;
  figures.layout = layout;
  figures.block_slots = pool->BlockSlots();
  figures.block_bytes = pool->BlockBytesFor(1);
  figures.decode_ring_bytes = pool->RingBytesFor(1);
  figures.prefill_ring_bytes = pool->RingBytesFor(plan.Runtime().batch);
  figures.state_bytes = plan.StateBytes();
  for (const LengthShare& share : lengths) {
    figures.length_block_bytes.push_back(pool->BlockBytesFor(share.length));
  }
  for (size_t layer = 0; layer < pool->NumLayers(); ++layer) {
    if (!pool->OwnsKV(layer)) continue;
    (pool->IsPaged(layer) ? figures.paged_layers : figures.ring_layers).push_back(layer);
  }
  return figures;
}

// PoolFiguresOf for the layout of the plan's backend and tile.
Expected<PoolFigures> PoolFiguresFor(const LayerPlan& plan, uint64_t block_slots,
                                     const std::vector<LengthShare>& lengths) {
  if (plan.Runtime().backend == Backend::kFlash) {
    return PoolFiguresOf<FlashLayout>(plan, block_slots, lengths, "FlashLayout");
  }
  switch (plan.Runtime().tile_rows) {
    case 8:
      return PoolFiguresOf<TiledLayout<8>>(plan, block_slots, lengths, "TiledLayout<8>");
    case 16:
      return PoolFiguresOf<TiledLayout<16>>(plan, block_slots, lengths, "TiledLayout<16>");
    case 32:
      return PoolFiguresOf<TiledLayout<32>>(plan, block_slots, lengths, "TiledLayout<32>");
    default:  // Build() admits 8, 16, 32 and 64 only
      return PoolFiguresOf<TiledLayout<64>>(plan, block_slots, lengths, "TiledLayout<64>");
  }
}

// One way to hold the sequences: the bytes of a sequence of each length, their expectation
// over the shares, and how many sequences the usable memory admits at that expectation.
struct Holding {
  const char* key;              // in --json
  const char* heading;          // in the table
  std::vector<uint64_t> bytes;  // per length
  double expected = 0;
  uint64_t admitted = 0;
};

// The ring layers of one kind, span and slot size, and what each of them keeps for one
// sequence.
struct RingRow {
  AttentionKind kind = AttentionKind::kSliding;
  uint64_t span = 0;
  uint64_t slot_bytes = 0;
  size_t num_layers = 0;
  uint64_t decode_capacity = 0, decode_slots = 0;    // the pool's ring for batch 1
  uint64_t kvcache_capacity = 0, kvcache_slots = 0;  // the plan's, for its batch
  // vLLM's rule, sliding layers only (0 for chunked): it frees a 16-token block once the
  // window has wholly passed it, so it holds RoundUp(window, 16) slots, or one block more
  // on the steps where the window starts inside a block.
  uint64_t vllm_slots = 0, vllm_slots_at_most = 0;
};

constexpr uint64_t kVllmBlockTokens = 16;  // vLLM's default --block-size

struct PoolReport {
  uint64_t usable_bytes = 0;
  PoolFigures figures;
  double mean_length = 0;
  // pool_decode, pool_prefill, kvcache (the plan's context), kvcache_at_length.
  std::vector<Holding> holdings;
  std::vector<RingRow> rings;
  uint64_t kvcache_ring_bytes = 0;                            // the plan's ring layers
  uint64_t vllm_ring_bytes = 0, vllm_ring_bytes_at_most = 0;  // the sliding ring layers
};

// Returns the pool report of `plan` for options.lengths in `usable_bytes`, or an error line.
std::string MakePoolReport(const LayerPlan& plan, const Options& options, uint64_t usable_bytes,
                           PoolReport* report) {
  const RuntimeSpec& runtime = plan.Runtime();
  for (const LengthShare& share : options.lengths) {
    if (share.length > runtime.context) {
      // The list stays out of Format's fixed-size buffer.
      return "option " + options.lengths_option + ": '" + options.lengths_text +
             Format("': %" PRIu64 " is past the context of %" PRIu64, share.length,
                    runtime.context);
    }
  }
  Expected<PoolFigures> figures = PoolFiguresFor(plan, options.block_slots, options.lengths);
  if (!figures.ok()) {
    const Error& error = figures.error();
    const std::string prefix = error.field + ": ";
    if (error.field == "block_slots" && error.message.rfind(prefix, 0) == 0) {
      return "option --block-slots: " + error.message.substr(prefix.size());
    }
    return "option --pool: " + error.message;
  }
  report->usable_bytes = usable_bytes;
  report->figures = figures.value();
  const PoolFigures& pool = report->figures;

  Holding decode{"pool_decode", "pool, decode", {}};
  Holding prefill{"pool_prefill", "pool, prefill", {}};
  Holding kvcache{"kvcache", "KVCache, full", {}};
  Holding sized{"kvcache_at_length", "KVCache, sized", {}};
  for (size_t i = 0; i < options.lengths.size(); ++i) {
    const uint64_t length = options.lengths[i].length;
    // Every holding of a hybrid model's sequence keeps its recurrent states too.
    decode.bytes.push_back(
        detail::SaturatingAdd(pool.decode_ring_bytes,
                              detail::SaturatingAdd(pool.length_block_bytes[i], pool.state_bytes)));
    prefill.bytes.push_back(
        detail::SaturatingAdd(pool.prefill_ring_bytes,
                              detail::SaturatingAdd(pool.length_block_bytes[i], pool.state_bytes)));
    kvcache.bytes.push_back(detail::SaturatingAdd(plan.TotalBytes(), plan.StateBytes()));
    RuntimeSpec at = runtime;
    at.context = length;
    at.batch = std::min(runtime.batch, length);
    at.rollback = std::min(runtime.rollback, length);
    Expected<LayerPlan> sized_plan = plan.WithRuntime(at);
    if (!sized_plan.ok()) return sized_plan.error().message;
    sized.bytes.push_back(
        detail::SaturatingAdd(sized_plan->TotalBytes(), sized_plan->StateBytes()));
    report->mean_length += options.lengths[i].fraction * static_cast<double>(length);
  }
  report->holdings = {decode, prefill, kvcache, sized};
  for (Holding& holding : report->holdings) {
    for (size_t i = 0; i < options.lengths.size(); ++i) {
      holding.expected += options.lengths[i].fraction * static_cast<double>(holding.bytes[i]);
    }
    holding.admitted = holding.expected > 0
                           ? static_cast<uint64_t>(
                                 std::floor(static_cast<double>(usable_bytes) / holding.expected))
                           : 0;
  }

  // The rings of one sequence: the pool's for batch 1 (a plan at batch 1 gives each layer's
  // slots; their bytes sum to RingBytesFor(1)), the plan's, and vLLM's rule.
  RuntimeSpec one = runtime;
  one.batch = 1;
  Expected<LayerPlan> decode_plan = plan.WithRuntime(one);
  if (!decode_plan.ok()) return decode_plan.error().message;
  for (size_t layer : pool.ring_layers) {
    const LayerInfo& info = plan.Layer(layer);
    const LayerInfo& decoding = decode_plan->Layer(layer);
    RingRow row;
    row.kind = info.spec.kind;
    row.span = info.span;
    row.slot_bytes = info.slot_bytes;
    row.decode_capacity = decoding.capacity;
    row.decode_slots = decoding.num_slots;
    row.kvcache_capacity = info.capacity;
    row.kvcache_slots = info.num_slots;
    if (info.spec.kind == AttentionKind::kSliding) {
      const uint64_t window = std::min(info.span, runtime.context);
      const uint64_t blocks = (window + kVllmBlockTokens - 1) / kVllmBlockTokens;
      const uint64_t blocks_at_most =
          std::min((window - 1 + kVllmBlockTokens - 1) / kVllmBlockTokens + 1,
                   (runtime.context + kVllmBlockTokens - 1) / kVllmBlockTokens);
      row.vllm_slots = blocks * kVllmBlockTokens;
      row.vllm_slots_at_most = blocks_at_most * kVllmBlockTokens;
    }
    report->kvcache_ring_bytes += info.bytes;
    report->vllm_ring_bytes += row.vllm_slots * row.slot_bytes;
    report->vllm_ring_bytes_at_most += row.vllm_slots_at_most * row.slot_bytes;
    bool folded = false;
    for (RingRow& seen : report->rings) {
      if (seen.kind == row.kind && seen.span == row.span && seen.slot_bytes == row.slot_bytes &&
          seen.decode_slots == row.decode_slots && seen.kvcache_slots == row.kvcache_slots) {
        ++seen.num_layers;
        folded = true;
        break;
      }
    }
    if (!folded) {
      row.num_layers = 1;
      report->rings.push_back(row);
    }
  }
  return "";
}

// Returns `expected` bytes as a whole number of bytes.
uint64_t RoundedBytes(double expected) { return static_cast<uint64_t>(std::llround(expected)); }

// Returns how many times `admitted` is `against`, as "19.00x", or "-" when `against` is 0.
std::string RatioText(uint64_t admitted, uint64_t against) {
  if (against == 0) return "-";
  return Format("%.2fx", static_cast<double>(admitted) / static_cast<double>(against));
}

std::string PoolText(const LayerPlan& plan, const PoolReport& report, const Options& options) {
  const RuntimeSpec& runtime = plan.Runtime();
  const PoolFigures& pool = report.figures;
  std::string out =
      Format("\npool of %s usable KV memory: KVPool<%s>, against one KVCache per sequence\n",
             FormatBytes(report.usable_bytes).c_str(), pool.layout.c_str());
  if (pool.ring_layers.empty()) {
    out += "  no ring layers\n";
  } else {
    out += Format(
        "  %zu ring layers: %s a sequence decoding (batch 1), %s prefilling (batch %" PRIu64 ")\n",
        pool.ring_layers.size(), FormatBytes(pool.decode_ring_bytes).c_str(),
        FormatBytes(pool.prefill_ring_bytes).c_str(), runtime.batch);
  }
  if (pool.state_bytes != 0) {
    out += Format("  recurrent states: %s a sequence (every holding below includes them)\n",
                  FormatBytes(pool.state_bytes).c_str());
  }
  if (pool.paged_layers.empty()) {
    out += "  no paged layers: no blocks\n";
  } else {
    out +=
        Format("  %zu paged layers: blocks of %" PRIu64 " positions, %s a block\n",
               pool.paged_layers.size(), pool.block_slots, FormatBytes(pool.block_bytes).c_str());
  }
  out += "  lengths: " + options.lengths_text;
  out += Format(" (%s; mean %.1f tokens)\n\n",
                options.lengths_option == "--mean-length" ? "every sequence" : "length:fraction",
                report.mean_length);

  std::vector<std::vector<std::string>> rows;
  rows.push_back({"length", "fraction", "blocks"});
  for (const Holding& holding : report.holdings) rows[0].push_back(holding.heading);
  for (size_t i = 0; i < options.lengths.size(); ++i) {
    const LengthShare& share = options.lengths[i];
    std::vector<std::string> row = {
        std::to_string(share.length), Format("%g", share.fraction),
        pool.block_bytes == 0 ? "-"
                              : std::to_string(pool.length_block_bytes[i] / pool.block_bytes)};
    for (const Holding& holding : report.holdings) row.push_back(FormatBytes(holding.bytes[i]));
    rows.push_back(row);
  }
  std::vector<std::string> expected = {"expected bytes", "", ""};
  std::vector<std::string> admitted = {"sequences", "", ""};
  std::vector<std::string> ratio = {"vs KVCache, full", "", ""};
  const uint64_t full = report.holdings[2].admitted;
  for (const Holding& holding : report.holdings) {
    expected.push_back(FormatBytes(RoundedBytes(holding.expected)));
    admitted.push_back(std::to_string(holding.admitted));
    ratio.push_back(RatioText(holding.admitted, full));
  }
  rows.push_back(expected);
  rows.push_back(admitted);
  rows.push_back(ratio);
  out += TableText(rows, {false, true, true, true, true, true, true}, "  ");
  out += Format("  pool, decode: rings for batch 1 and ceil(length / %" PRIu64
                ") blocks; pool, prefill: rings for\n"
                "  batch %" PRIu64 " and the blocks; KVCache, full: one KVCache at context %" PRIu64
                ", batch %" PRIu64
                ";\n"
                "  KVCache, sized: one planned at the sequence's length; a KVCache keeps its batch "
                "for its life\n",
                pool.block_slots, runtime.batch, runtime.context, runtime.batch);

  if (report.rings.empty()) return out;
  out += "\n  ring layers of one sequence, held positions in slots:\n";
  rows.clear();
  rows.push_back({"layers", "kind", "window", "slot bytes", "pool (batch 1)",
                  Format("KVCache (batch %" PRIu64 ")", runtime.batch),
                  Format("vLLM (%" PRIu64 "-token blocks)", kVllmBlockTokens)});
  for (const RingRow& ring : report.rings) {
    const bool sliding = ring.kind == AttentionKind::kSliding;
    rows.push_back(
        {std::to_string(ring.num_layers), ToString(ring.kind),
         (sliding ? "" : "chunk ") + std::to_string(ring.span), FormatBytes(ring.slot_bytes),
         Format("%" PRIu64 " in %" PRIu64 " slots", ring.decode_capacity, ring.decode_slots),
         Format("%" PRIu64 " in %" PRIu64 " slots", ring.kvcache_capacity, ring.kvcache_slots),
         !sliding ? "-"
         : ring.vllm_slots_at_most == ring.vllm_slots
             ? std::to_string(ring.vllm_slots)
             : Format("%" PRIu64 " - %" PRIu64, ring.vllm_slots, ring.vllm_slots_at_most)});
  }
  const bool any_sliding =
      std::any_of(report.rings.begin(), report.rings.end(),
                  [](const RingRow& ring) { return ring.kind == AttentionKind::kSliding; });
  std::string vllm_bytes = "-";
  if (any_sliding) {
    vllm_bytes = FormatBytes(report.vllm_ring_bytes);
    if (report.vllm_ring_bytes_at_most != report.vllm_ring_bytes) {
      vllm_bytes += " - " + FormatBytes(report.vllm_ring_bytes_at_most);
    }
  }
  rows.push_back({"bytes", "", "", "", FormatBytes(pool.decode_ring_bytes),
                  FormatBytes(report.kvcache_ring_bytes), vllm_bytes});
  out += TableText(rows, {false, false, false, true, true, true, true}, "  ");
  out +=
      "  vLLM frees a sliding layer's block once the window has passed all of it: one block more\n"
      "  on the steps where the window starts inside a block; its chunked layers are not counted\n";
  return out;
}

nlohmann::ordered_json PoolJson(const PoolReport& report, const Options& options) {
  const PoolFigures& pool = report.figures;
  nlohmann::ordered_json json;
  json["usable_bytes"] = report.usable_bytes;
  json["layout"] = pool.layout;
  json["block_slots"] = pool.block_slots;
  json["block_bytes"] = pool.block_bytes;
  json["num_ring_layers"] = pool.ring_layers.size();
  json["num_paged_layers"] = pool.paged_layers.size();
  json["decode_ring_bytes"] = pool.decode_ring_bytes;
  json["prefill_ring_bytes"] = pool.prefill_ring_bytes;
  json["state_bytes"] = pool.state_bytes;
  json["mean_length"] = report.mean_length;
  nlohmann::ordered_json lengths = nlohmann::ordered_json::array();
  for (size_t i = 0; i < options.lengths.size(); ++i) {
    nlohmann::ordered_json entry;
    entry["length"] = options.lengths[i].length;
    entry["fraction"] = options.lengths[i].fraction;
    entry["blocks"] = pool.block_bytes == 0 ? 0 : pool.length_block_bytes[i] / pool.block_bytes;
    for (const Holding& holding : report.holdings) {
      entry[std::string(holding.key) + "_bytes"] = holding.bytes[i];
    }
    lengths.push_back(entry);
  }
  json["lengths"] = lengths;
  nlohmann::ordered_json expected, sequences, ratio;
  const uint64_t full = report.holdings[2].admitted;
  for (const Holding& holding : report.holdings) {
    expected[holding.key] = RoundedBytes(holding.expected);
    sequences[holding.key] = holding.admitted;
    ratio[holding.key] = full == 0 ? nlohmann::ordered_json()
                                   : nlohmann::ordered_json(static_cast<double>(holding.admitted) /
                                                            static_cast<double>(full));
  }
  json["expected_bytes"] = expected;
  json["sequences"] = sequences;
  json["ratio"] = ratio;
  nlohmann::ordered_json rings = nlohmann::ordered_json::array();
  for (const RingRow& ring : report.rings) {
    rings.push_back({{"kind", ToString(ring.kind)},
                     {"span", ring.span},
                     {"num_layers", ring.num_layers},
                     {"slot_bytes", ring.slot_bytes},
                     {"pool_decode_capacity", ring.decode_capacity},
                     {"pool_decode_num_slots", ring.decode_slots},
                     {"kvcache_capacity", ring.kvcache_capacity},
                     {"kvcache_num_slots", ring.kvcache_slots},
                     {"vllm_slots", ring.vllm_slots},
                     {"vllm_slots_at_most", ring.vllm_slots_at_most}});
  }
  json["rings"] = rings;
  json["ring_bytes"] = {{"pool_decode", pool.decode_ring_bytes},
                        {"pool_prefill", pool.prefill_ring_bytes},
                        {"kvcache", report.kvcache_ring_bytes},
                        {"vllm", report.vllm_ring_bytes},
                        {"vllm_at_most", report.vllm_ring_bytes_at_most}};
  return json;
}

std::string TextReport(const Model& model, const LayerPlan& plan, const Options& options,
                       uint64_t max_context, const PoolReport* pool) {
  const RuntimeSpec& runtime = plan.Runtime();
  // The name (a path, for --config) stays out of Format's fixed-size buffer.
  std::string out = "kvring plan: " + model.name;
  out +=
      Format(", context %" PRIu64 ", batch %" PRIu64 ", rollback %" PRIu64
             ", backend %s, %s, %" PRIu64 " sequence%s\n",
             runtime.context, runtime.batch, runtime.rollback,
             runtime.backend == Backend::kTiled
                 ? ("tiled (" + std::to_string(runtime.tile_rows) + "-row tiles)").c_str()
                 : "flash",
             options.dtype.c_str(), runtime.num_sequences, runtime.num_sequences == 1 ? "" : "s");
  out += SourceLines(model, options) + "\n";

  // Fold runs of consecutive layers whose rows read the same.
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"layers", "kind", "window", "owner", "kv_heads x head_dim", "capacity",
                  "num_slots", "bytes", "format"});
  if (plan.HasStateLayers()) rows.back().push_back("state");
  for (size_t first = 0; first < plan.NumLayers();) {
    const std::vector<std::string> cells = RowCells(plan, plan.Layer(first));
    size_t last = first;
    while (last + 1 < plan.NumLayers() && RowCells(plan, plan.Layer(last + 1)) == cells) ++last;
    std::vector<std::string> row = {
        last == first ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last)};
    row.insert(row.end(), cells.begin(), cells.end());
    rows.push_back(row);
    first = last + 1;
  }
  // Numbers (capacity, num_slots, bytes) align right, words left.
  std::vector<bool> right = {false, false, false, false, false, true, true, true, false};
  if (plan.HasStateLayers()) right.push_back(true);
  out += TableText(rows, right, "");

  const uint64_t total = plan.TotalBytes();
  const uint64_t flat = plan.FlatBytes();
  out += Format("\nowning layers: %zu of %zu; slots padded to %s (padding: %s)\n",
                plan.NumOwningLayers(), plan.NumLayers(),
                runtime.backend == Backend::kFlash
                    ? "odd numbers of 32-slot tiles"
                    : ("tiles of " + std::to_string(plan.SlotAlignment()) + " rows").c_str(),
                FormatBytes(plan.PaddingBytes()).c_str());
  out += Format("kvring, per sequence:     %12s  (%s bytes)\n", FormatBytes(total).c_str(),
                WithSeparators(total).c_str());
  out += Format("flat cache, per sequence: %12s  (%s bytes)\n", FormatBytes(flat).c_str(),
                WithSeparators(flat).c_str());
  if (flat > 0) {
    out += Format("saving:                   %12s  (%.1f%% of the flat cache)\n",
                  FormatBytes(flat - total).c_str(),
                  100.0 * static_cast<double>(flat - total) / static_cast<double>(flat));
  }
  if (runtime.num_sequences > 1) {
    out += Format("kvring, %" PRIu64 " sequences: %12s  (%s bytes)\n", runtime.num_sequences,
                  FormatBytes(plan.TotalBytesAllSequences()).c_str(),
                  WithSeparators(plan.TotalBytesAllSequences()).c_str());
  }
  out += Format("one more token of context adds %s per sequence\n",
                FormatBytes(plan.ContextTokenBytes()).c_str());
  out += IndexerLine(plan);
  if (plan.HasStateLayers()) {
    size_t state_layers = 0;
    uint64_t copies = 0;  // the plan's, the same for every layer with a state
    for (const LayerInfo& layer : plan.Layers()) {
      state_layers += layer.HasState();
      if (layer.HasState()) copies = layer.state_copies;
    }
    out += Format("recurrent state, per sequence: %s in %zu layers (%" PRIu64
                  " cop%s each: rollback %" PRIu64 " + 1%s; it does not grow with the context)\n",
                  FormatBytes(plan.StateBytes()).c_str(), state_layers, copies,
                  copies == 1 ? "y" : "ies", runtime.rollback,
                  runtime.stage_states ? " + 1 staged" : "");
    out += Format("K/V and state, per sequence: %s\n",
                  FormatBytes(plan.TotalBytes() + plan.StateBytes()).c_str());
  }

  if (options.has_memory) {
    const CapacityReport report = plan.Capacity(options.budget, max_context);
    out += Format("\ncapacity of %s device memory (weights %s, workspace %s, margin %s):\n",
                  FormatBytes(options.budget.device_bytes).c_str(),
                  FormatBytes(options.budget.weight_bytes).c_str(),
                  FormatBytes(options.budget.workspace_bytes).c_str(),
                  FormatBytes(options.budget.margin_bytes).c_str());
    out += Format("  usable KV memory: %s\n", FormatBytes(report.usable_bytes).c_str());
    out += Format("  maximum concurrency for %" PRIu64 " tokens per request: %" PRIu64 "\n",
                  runtime.context, report.max_sequences);
    out += Format("  tokens held: %s\n", WithSeparators(report.max_tokens).c_str());
    out += Format("  largest context for %" PRIu64 " sequence%s (up to %" PRIu64 "): %" PRIu64 "\n",
                  runtime.num_sequences, runtime.num_sequences == 1 ? "" : "s", max_context,
                  report.max_context);
  }
  if (pool != nullptr) out += PoolText(plan, *pool, options);
  return out;
}

// The keys every JSON report starts with: the model and the runtime (its context only when
// `with_context`; a sweep has many).
nlohmann::ordered_json JsonHead(const Model& model, const RuntimeSpec& runtime,
                                const Options& options, bool with_context) {
  nlohmann::ordered_json json;
  json["model"] = model.name;
  if (model.config) {
    json["config"] = model.name;
    json["model_type"] = model.config->model_type;
    nlohmann::ordered_json defaults = nlohmann::ordered_json::object();
    for (const HfDefault& entry : model.config->defaults) defaults[entry.key] = entry.value;
    json["defaults"] = defaults;
  }
  json["tensor_parallel"] = options.tensor_parallel;
  if (with_context) json["context"] = runtime.context;
  json["batch"] = runtime.batch;
  json["rollback"] = runtime.rollback;
  json["stage_states"] = runtime.stage_states;
  json["backend"] = ToString(runtime.backend);
  json["tile_rows"] = runtime.backend == Backend::kTiled ? runtime.tile_rows : 0;
  json["dtype"] = options.dtype;
  // A per-kind --dtype has no one element size: each layer says its format.
  const bool per_kind = options.dtype.find('=') != std::string::npos;
  json["element_bytes"] = per_kind ? 0 : ElementBytes(runtime.element_type);
  json["num_sequences"] = runtime.num_sequences;
  json["slot_alignment"] = SlotAlignment(runtime);
  return json;
}

std::string JsonReport(const Model& model, const LayerPlan& plan, const Options& options,
                       uint64_t max_context, const PoolReport* pool) {
  nlohmann::ordered_json json = JsonHead(model, plan.Runtime(), options, /*with_context=*/true);
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const LayerInfo& layer : plan.Layers()) {
    nlohmann::ordered_json entry;
    entry["index"] = layer.index;
    entry["kind"] = KindText(layer.spec);
    entry["window"] = layer.spec.window;
    entry["chunk"] = layer.spec.chunk;
    entry["owner"] = layer.owner;
    entry["num_kv_heads"] = layer.spec.num_kv_heads;
    entry["head_dim"] = layer.spec.head_dim;
    entry["v_head_dim"] = layer.spec.IsLatent() ? 0 : layer.spec.VHeadDim();
    entry["latent_dim"] = layer.spec.latent_dim;
    entry["capacity"] = layer.capacity;
    entry["num_slots"] = layer.num_slots;
    entry["format"] = FormatText(plan, layer);
    entry["k_slot_bytes"] = layer.k_slot_bytes;
    entry["v_slot_bytes"] = layer.v_slot_bytes;
    entry["slot_bytes"] = layer.slot_bytes;
    entry["bytes"] = layer.bytes;
    entry["padding_bytes"] = layer.padding_bytes;
    entry["conv_state_bytes"] = layer.conv_state_bytes;
    entry["recurrent_state_bytes"] = layer.recurrent_state_bytes;
    entry["state_copies"] = layer.state_copies;
    entry["state_bytes"] = layer.state_bytes;
    entry["indexer_dim"] = layer.spec.indexer_dim;
    entry["indexer_slot_bytes"] = layer.indexer_slot_bytes;  // part of slot_bytes
    layers.push_back(entry);
  }
  json["layers"] = layers;
  json["num_owning_layers"] = plan.NumOwningLayers();
  json["total_bytes"] = plan.TotalBytes();
  json["padding_bytes"] = plan.PaddingBytes();
  json["total_bytes_all_sequences"] = plan.TotalBytesAllSequences();
  json["flat_bytes"] = plan.FlatBytes();
  json["saving_bytes"] = plan.FlatBytes() - plan.TotalBytes();
  json["context_token_bytes"] = plan.ContextTokenBytes();
  json["state_bytes"] = plan.StateBytes();
  if (options.has_memory) {
    const CapacityReport report = plan.Capacity(options.budget, max_context);
    json["capacity"] = {{"device_bytes", options.budget.device_bytes},
                        {"weight_bytes", options.budget.weight_bytes},
                        {"workspace_bytes", options.budget.workspace_bytes},
                        {"margin_bytes", options.budget.margin_bytes},
                        {"usable_bytes", report.usable_bytes},
                        {"bytes_per_sequence", report.bytes_per_sequence},
                        {"max_sequences", report.max_sequences},
                        {"max_tokens", report.max_tokens},
                        {"context_limit", max_context},
                        {"max_context", report.max_context}};
  }
  if (pool != nullptr) json["pool"] = PoolJson(*pool, options);
  return json.dump(2) + "\n";
}

constexpr uint64_t kMaxSweepPoints = 100000;

// Returns the contexts a sweep visits: `step`, 2 * `step`, ... (1024, 2048, ... when `step` is
// 0) below `context`, and `context` itself last. Empty when that makes too many points.
std::vector<uint64_t> SweepContexts(uint64_t context, uint64_t step) {
  std::vector<uint64_t> contexts;
  if (step == 0) {
    for (uint64_t c = 1024; c < context; c *= 2) {
      contexts.push_back(c);
      if (c > UINT64_MAX / 2) break;
    }
  } else {
    if (context / step >= kMaxSweepPoints) return {};
    for (uint64_t c = step; c < context; c += step) contexts.push_back(c);
  }
  contexts.push_back(context);
  return contexts;
}

// Fills *out with the sweep of `plan`'s layers: one line (or JSON point) per context, the
// batch and rollback capped at each point's context as the default batch is. Returns the
// error of a context the planner rejects, or "".
std::string SweepReport(const Model& model, const LayerPlan& plan, const Options& options,
                        std::string* out) {
  const RuntimeSpec& runtime = plan.Runtime();
  const std::vector<uint64_t> contexts = SweepContexts(runtime.context, options.sweep_step);
  if (contexts.empty()) {
    return Format("option --sweep-step: %" PRIu64 " makes more than %" PRIu64
                  " points up to context %" PRIu64 "; take a larger step",
                  options.sweep_step, kMaxSweepPoints, runtime.context);
  }
  nlohmann::ordered_json points = nlohmann::ordered_json::array();
  std::string csv = "context,kvring_bytes,flat_bytes\n";
  for (uint64_t context : contexts) {
    RuntimeSpec point = runtime;
    point.context = context;
    point.batch = std::min(runtime.batch, context);
    point.rollback = std::min(runtime.rollback, context);
    Expected<LayerPlan> at = plan.WithRuntime(point);
    if (!at.ok()) return at.error().message;
    csv +=
        Format("%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n", context, at->TotalBytes(), at->FlatBytes());
    points.push_back({{"context", context},
                      {"kvring_bytes", at->TotalBytes()},
                      {"flat_bytes", at->FlatBytes()}});
  }
  if (options.json) {
    nlohmann::ordered_json json = JsonHead(model, runtime, options, /*with_context=*/false);
    json["points"] = points;
    *out = json.dump(2) + "\n";
  } else {
    *out = csv;
  }
  return "";
}

std::string ListPresets() {
  std::string out;
  for (const ModelPreset& preset : ModelPresets()) {
    out += Format("%-16s %3zu layers, max context %9" PRIu64 "%s%s\n", preset.name.c_str(),
                  preset.layers.size(), preset.max_context, preset.notes.empty() ? "" : "; ",
                  preset.notes.c_str());
  }
  return out;
}

}  // namespace

bool ParseSize(const std::string& text, uint64_t* value) {
  size_t i = 0;
  uint64_t number = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (!detail::CheckedMul(number, 10, &number) ||
        !detail::CheckedAdd(number, static_cast<uint64_t>(text[i] - '0'), &number)) {
      return false;
    }
    ++i;
  }
  if (i == 0) return false;
  std::string suffix = text.substr(i);
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  struct Unit {
    const char* suffix;
    uint64_t factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1ull << 10},
      {"m", 1ull << 20},
      {"g", 1ull << 30},
      {"t", 1ull << 40},
      {"kib", 1ull << 10},
      {"mib", 1ull << 20},
      {"gib", 1ull << 30},
      {"tib", 1ull << 40},
      {"kb", 1000ull},
      {"mb", 1000ull * 1000},
      {"gb", 1000ull * 1000 * 1000},
      {"tb", 1000ull * 1000 * 1000 * 1000},
  };
  for (const Unit& unit : kUnits) {
    if (suffix == unit.suffix) {
      uint64_t result;
      if (!detail::CheckedMul(number, unit.factor, &result)) return false;
      *value = result;
      return true;
    }
  }
  return false;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double scaled = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (scaled >= 1024.0 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    scaled /= 1024.0;
    ++unit;
  }
  return Format("%.2f %s", scaled, kUnits[unit]);
}

Expected<std::vector<LayerSpec>> SplitAcrossRanks(const std::vector<LayerSpec>& layers,
                                                  uint32_t num_attention_heads,
                                                  uint64_t tensor_parallel, bool states_per_rank) {
  using std::to_string;
  const std::string ranks = to_string(tensor_parallel);
  if (tensor_parallel == 0) {
    return Error{"tensor_parallel", "tensor_parallel: 0 is invalid: one rank at least"};
  }
  if (num_attention_heads != 0 && num_attention_heads % tensor_parallel != 0) {
    return Error{"tensor_parallel",
                 "tensor_parallel: " + ranks + " does not divide num_attention_heads " +
                     to_string(num_attention_heads) + "; every rank needs whole query heads"};
  }
  std::vector<LayerSpec> rank_layers = layers;
  for (size_t i = 0; i < rank_layers.size(); ++i) {
    LayerSpec& spec = rank_layers[i];
    if (tensor_parallel > 1 && spec.HasState() && !states_per_rank) {
      return Error{"tensor_parallel",
                   "tensor_parallel: layer " + to_string(i) +
                       " has a recurrent state, whose split across ranks follows its family's "
                       "rule: plan the model from its config.json (--config)"};
    }
    // MLA: every rank keeps the latent; a layer without attention holds no K/V.
    if (spec.IsLatent() || !spec.attends || tensor_parallel == 1) continue;
    const std::string field = "layers[" + to_string(i) + "].num_kv_heads";
    const uint64_t kv_heads = spec.num_kv_heads;
    if (kv_heads >= tensor_parallel) {
      if (kv_heads % tensor_parallel != 0) {
        return Error{field, "tensor_parallel: " + ranks + " does not divide the " +
                                to_string(kv_heads) + " KV heads of layer " + to_string(i)};
      }
      spec.num_kv_heads = static_cast<uint32_t>(kv_heads / tensor_parallel);
    } else {
      // Fewer KV heads than ranks: each rank holds one head, replicated on ranks / heads ranks.
      if (tensor_parallel % kv_heads != 0) {
        return Error{field, "tensor_parallel: " + ranks + " ranks cannot hold the " +
                                to_string(kv_heads) + " KV heads of layer " + to_string(i) +
                                " in whole replicas (ranks must be a multiple of the heads)"};
      }
      spec.num_kv_heads = 1;
    }
  }
  return rank_layers;
}

int RunPlanCli(const std::vector<std::string>& args, std::string* out, std::string* err) {
  out->clear();
  err->clear();
  const auto fail = [&](const std::string& message) {
    out->clear();
    *err = "kvring-plan: " + message + "\n";
    return 2;
  };
  Options options;
  const std::string error = ParseArgs(args, &options);
  if (!error.empty()) return fail(error);
  if (options.help) {
    *out = kUsage;
    return 0;
  }
  if (options.list_presets) {
    *out = ListPresets();
    return 0;
  }
  Model model;
  if (!options.config.empty()) {
    HfReadOptions read = options.read;
    read.tensor_parallel = options.tensor_parallel;
    Expected<HfModel> config = ReadHfConfig(options.config, read);
    if (!config.ok()) return fail(config.error().message);
    model.name = options.config;
    model.max_context = config->max_context;
    if (model.max_context == 0 && !options.has_context) {
      return fail(options.config + ": " + config->class_name +
                  " names no context length (no layer attends past a window, so its memory "
                  "stops growing): give --context N");
    }
    model.layers = config->layers;
    model.num_attention_heads = config->num_attention_heads;
    model.config = config.value();
  } else {
    Expected<ModelPreset> preset = FindModelPreset(options.preset);
    if (!preset.ok()) return fail(preset.error().message);
    model.name = preset->name;
    model.max_context = preset->max_context;
    model.layers = preset->layers;
  }
  Expected<std::vector<LayerSpec>> rank_layers =
      SplitAcrossRanks(model.layers, model.num_attention_heads, options.tensor_parallel,
                       model.config && model.config->tensor_parallel == options.tensor_parallel);
  if (!rank_layers.ok()) return fail(rank_layers.error().message);
  model.layers = rank_layers.value();

  RuntimeSpec runtime = options.runtime;
  if (!options.has_context) runtime.context = model.max_context;
  if (!options.has_batch) {
    runtime.batch = std::min(kDefaultBatch, std::max<uint64_t>(runtime.context, 1));
  }
  LayerPlan::Builder builder;
  for (const LayerSpec& spec : model.layers) builder.AddLayer(spec);
  for (AttentionKind kind : kKinds) {
    const auto& format = options.kind_formats[static_cast<size_t>(kind)];
    if (format) builder.SetFormat(kind, *format);
  }
  Expected<LayerPlan> plan = builder.SetRuntime(runtime).Build();
  if (!plan.ok()) return fail(plan.error().message);
  if (options.sweep) {
    std::string report;
    const std::string sweep_error = SweepReport(model, *plan, options, &report);
    if (!sweep_error.empty()) return fail(sweep_error);
    *out = report;
    return 0;
  }
  // The capacity report searches contexts up to the larger of the model's and the plan's.
  const uint64_t max_context = std::max(model.max_context, runtime.context);
  PoolReport pool;
  if (options.pool) {
    const uint64_t usable = plan->Capacity(options.budget, max_context).usable_bytes;
    const std::string pool_error = MakePoolReport(*plan, options, usable, &pool);
    if (!pool_error.empty()) return fail(pool_error);
  }
  const PoolReport* pool_report = options.pool ? &pool : nullptr;
  *out = options.json ? JsonReport(model, *plan, options, max_context, pool_report)
                      : TextReport(model, *plan, options, max_context, pool_report);
  return 0;
}

}  // namespace tools
}  // namespace kvring
