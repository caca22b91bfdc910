// tools/plan_cli.cc: argument parsing and reports of kvring-plan.
#include "plan_cli.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvring/layer_plan.h"
#include "kvring/model_presets.h"

namespace kvring {
namespace tools {
namespace {

constexpr const char* kDefaultPreset = "gemma-3-27b";
constexpr uint64_t kDefaultBatch = 512;

constexpr const char* kUsage =
    R"(Usage: kvring-plan [options]
Prints the per-layer KV cache plan of a model: what each layer must hold (sliding layers keep
window - 1 + max(batch, rollback) slots, global layers the whole context) and what it costs.

Model:
  --preset NAME        a built-in model (default gemma-3-27b); --list-presets lists them
  --list-presets       print the preset names with their layer counts and contexts
Runtime:
  --context N          context in tokens (default: the model's maximum)
  --batch N            largest append batch (default 512, capped by the context)
  --rollback N         rollback headroom in tokens (default 0)
  --sequences N        number of sequences (default 1)
  --backend B          flash or tiled (default flash)
  --tile-rows N        tile height of the tiled backend: 8, 16, 32 or 64 (default 16)
  --dtype T            bf16, f16, f32, fp8 or int8 element size for accounting (default bf16)
Capacity report (given --memory):
  --memory BYTES       device memory
  --weights BYTES      model weights (default 0)
  --workspace BYTES    activations and scratch (default 0)
  --margin BYTES       memory kept free (default 0)
Output:
  --json               one JSON object instead of the table (schema: docs/planning.md)
  --help               this text

Numbers take suffixes: k, m, g, t are powers of 1024 (128k = 131072); KiB, MiB, GiB, TiB too;
KB, MB, GB, TB are powers of 1000.
)";

struct Options {
  std::string preset = kDefaultPreset;
  bool has_context = false, has_batch = false;
  RuntimeSpec runtime;
  bool has_memory = false;
  MemoryBudget budget;
  bool json = false;
  bool list_presets = false;
  bool help = false;
};

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
    } else if (name == "--context") {
      error = size(&options->runtime.context);
      options->has_context = true;
    } else if (name == "--batch") {
      error = size(&options->runtime.batch);
      options->has_batch = true;
    } else if (name == "--rollback") {
      error = size(&options->runtime.rollback);
    } else if (name == "--sequences") {
      error = size(&options->runtime.num_sequences);
    } else if (name == "--tile-rows") {
      uint64_t rows = 0;
      error = size(&rows);
      if (error.empty() && (rows < kMinTileRows || rows > kMaxTileRows || (rows & (rows - 1)))) {
        error = "option --tile-rows: " + std::to_string(rows) + " is not 8, 16, 32 or 64";
      }
      options->runtime.tile_rows = static_cast<uint32_t>(rows);
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
      for (ElementType type : {ElementType::kBF16, ElementType::kF16, ElementType::kF32,
                               ElementType::kFP8, ElementType::kInt8}) {
        if (dtype == ToString(type)) {
          options->runtime.element_type = type;
          found = true;
        }
      }
      if (error.empty() && !found) {
        error = "option --dtype: '" + dtype + "' is not bf16, f16, f32, fp8 or int8";
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
    } else {
      error = "unknown option '" + args[i] + "' (see --help)";
    }
    if (!error.empty()) return error;
  }
  return "";
}

std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return buffer;
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

// The cells of a layer's table row, apart from its index range.
std::vector<std::string> RowCells(const LayerInfo& layer) {
  return {ToString(layer.spec.kind),
          SpanText(layer.spec),
          layer.OwnsKV() ? "self" : "layer " + std::to_string(layer.owner),
          ShapeText(layer.spec),
          layer.OwnsKV() ? std::to_string(layer.capacity) : "-",
          layer.OwnsKV() ? std::to_string(layer.num_slots) : "-",
          layer.OwnsKV() ? FormatBytes(layer.bytes) : "0 (shared)"};
}

std::string TextReport(const std::string& model, const LayerPlan& plan, const Options& options,
                       uint64_t max_context) {
  const RuntimeSpec& runtime = plan.Runtime();
  std::string out = Format(
      "kvring plan: %s, context %" PRIu64 ", batch %" PRIu64 ", rollback %" PRIu64
      ", backend %s, %s, %" PRIu64 " sequence%s\n\n",
      model.c_str(), runtime.context, runtime.batch, runtime.rollback,
      runtime.backend == Backend::kTiled
          ? ("tiled (" + std::to_string(runtime.tile_rows) + "-row tiles)").c_str()
          : "flash",
      ToString(runtime.element_type), runtime.num_sequences, runtime.num_sequences == 1 ? "" : "s");

  // Fold runs of consecutive layers whose rows read the same.
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"layers", "kind", "window", "owner", "kv_heads x head_dim", "capacity",
                  "num_slots", "bytes"});
  for (size_t first = 0; first < plan.NumLayers();) {
    const std::vector<std::string> cells = RowCells(plan.Layer(first));
    size_t last = first;
    while (last + 1 < plan.NumLayers() && RowCells(plan.Layer(last + 1)) == cells) ++last;
    std::vector<std::string> row = {
        last == first ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last)};
    row.insert(row.end(), cells.begin(), cells.end());
    rows.push_back(row);
    first = last + 1;
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      // Numbers align right, words left.
      const bool right = c >= 5;
      const std::string pad(widths[c] - row[c].size(), ' ');
      line += (c ? "  " : "") + (right ? pad + row[c] : row[c] + pad);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }

  const uint64_t total = plan.TotalBytes();
  const uint64_t flat = plan.FlatBytes();
  out += Format("\nowning layers: %zu of %zu; slots padded to multiples of %" PRIu64 "\n",
                plan.NumOwningLayers(), plan.NumLayers(), plan.SlotAlignment());
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
  return out;
}

std::string JsonReport(const std::string& model, const LayerPlan& plan, const Options& options,
                       uint64_t max_context) {
  const RuntimeSpec& runtime = plan.Runtime();
  nlohmann::ordered_json json;
  json["model"] = model;
  json["context"] = runtime.context;
  json["batch"] = runtime.batch;
  json["rollback"] = runtime.rollback;
  json["backend"] = ToString(runtime.backend);
  json["tile_rows"] = runtime.backend == Backend::kTiled ? runtime.tile_rows : 0;
  json["dtype"] = ToString(runtime.element_type);
  json["element_bytes"] = plan.ElementBytes();
  json["num_sequences"] = runtime.num_sequences;
  json["slot_alignment"] = plan.SlotAlignment();
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const LayerInfo& layer : plan.Layers()) {
    nlohmann::ordered_json entry;
    entry["index"] = layer.index;
    entry["kind"] = ToString(layer.spec.kind);
    entry["window"] = layer.spec.window;
    entry["chunk"] = layer.spec.chunk;
    entry["owner"] = layer.owner;
    entry["num_kv_heads"] = layer.spec.num_kv_heads;
    entry["head_dim"] = layer.spec.head_dim;
    entry["v_head_dim"] = layer.spec.IsLatent() ? 0 : layer.spec.VHeadDim();
    entry["latent_dim"] = layer.spec.latent_dim;
    entry["capacity"] = layer.capacity;
    entry["num_slots"] = layer.num_slots;
    entry["slot_bytes"] = layer.slot_bytes;
    entry["bytes"] = layer.bytes;
    layers.push_back(entry);
  }
  json["layers"] = layers;
  json["num_owning_layers"] = plan.NumOwningLayers();
  json["total_bytes"] = plan.TotalBytes();
  json["total_bytes_all_sequences"] = plan.TotalBytesAllSequences();
  json["flat_bytes"] = plan.FlatBytes();
  json["saving_bytes"] = plan.FlatBytes() - plan.TotalBytes();
  json["context_token_bytes"] = plan.ContextTokenBytes();
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
  return json.dump(2) + "\n";
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
  Expected<ModelPreset> preset = FindModelPreset(options.preset);
  if (!preset.ok()) return fail(preset.error().message);
  RuntimeSpec runtime = options.runtime;
  if (!options.has_context) runtime.context = preset->max_context;
  if (!options.has_batch)
    runtime.batch = std::min(kDefaultBatch, std::max<uint64_t>(runtime.context, 1));
  Expected<LayerPlan> plan = BuilderFor(*preset).SetRuntime(runtime).Build();
  if (!plan.ok()) return fail(plan.error().message);
  // The capacity report searches contexts up to the larger of the model's and the plan's.
  const uint64_t max_context = std::max(preset->max_context, runtime.context);
  *out = options.json ? JsonReport(preset->name, *plan, options, max_context)
                      : TextReport(preset->name, *plan, options, max_context);
  return 0;
}

}  // namespace tools
}  // namespace kvring
