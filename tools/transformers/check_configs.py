#!/usr/bin/env python3
"""Checks that kvring-plan reads config.json files as transformers builds the model.

For each file: transformers' configuration class of its model_type reads it, the text model is
built on PyTorch's meta device (no memory, no weights), and each decoder layer's attention
module gives its kind, window or chunk, K/V heads, head dims and, for layers that read another
layer's KV, the owner. `kvring-plan --config FILE --json` must report the same per layer, and
the same context (max_position_embeddings). A file that transformers refuses (an exception
while reading it or building the model) must be refused by kvring-plan too (exit status 2);
kvring-plan may refuse more (it never guesses what a class default of one checkpoint means).

Run it where transformers and torch are installed (tools/transformers/README.md: a chroot of
Debian's unstable release): python3 check_configs.py --kvring-plan BIN FILE...
Exit status 0 when every file agrees; 1 with one line per difference otherwise.
"""

import argparse
import importlib
import json
import re
import subprocess
import sys
import types
import warnings


# Keys whose values decide the KV cache; a strict type error on any other key (for example
# Llama 4 Scout's published "attn_temperature_tuning": 4, which transformers 5 types as a bool)
# is not what this check is about: the file is checked again without that key, and said so.
KV_KEYS = {"model_type", "text_config", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "hidden_size", "sliding_window", "layer_types",
           "attention_chunk_size", "no_rope_layers", "no_rope_layer_interval", "use_sliding_window",
           "max_window_layers", "sliding_window_pattern", "num_kv_shared_layers",
           "global_head_dim", "num_global_key_value_heads", "attention_k_eq_v", "kv_lora_rank",
           "qk_rope_head_dim", "max_position_embeddings", "global_attn_every_n_layers",
           "use_bidirectional_attention", "state_size", "conv_kernel", "expand", "num_heads",
           "n_groups"}


def transformers_layers(path, dropped=None):
    """Returns (context, [layer facts]) as transformers builds the model of `path`; appends to
    `dropped` the keys left out because transformers refused their type (not KV keys)."""
    with open(path) as f:
        config_dict = json.load(f)
    while True:
        try:
            return build_layers(dict(config_dict))
        except Exception as error:
            # transformers 5.12 cannot build a Zamba2 of two or more shared blocks (its
            # tie_weights_keys check fails); their count decides only which blocks share
            # weights, not a layer's K/V or state, so the check builds one.
            blocks = config_dict.get("num_mem_blocks", 1)
            if ("tie_weights_keys" in str(error) and config_dict.get("model_type") == "zamba2"
                    and dropped is not None and isinstance(blocks, int) and blocks > 1):
                dropped.append(f"num_mem_blocks: {blocks}")
                config_dict["num_mem_blocks"] = 1
                continue
            found = re.search(r"Validation error for field '(\w+)'", str(error))
            key = found.group(1) if found else None
            holder = config_dict.get("text_config", config_dict)
            if dropped is None or key is None or key in KV_KEYS or key not in holder:
                raise
            dropped.append(f"{key}: {json.dumps(holder.pop(key))}")


# Qwen Omni's configurations and their thinkers' text model classes.
THINKERS = {"qwen2_5_omni": "Qwen2_5OmniThinkerTextModel",
            "qwen2_5_omni_thinker": "Qwen2_5OmniThinkerTextModel",
            "qwen3_omni_moe": "Qwen3OmniMoeThinkerTextModel",
            "qwen3_omni_moe_thinker": "Qwen3OmniMoeThinkerTextModel"}


def build_layers(config_dict):
    import torch
    from transformers import AutoModel, CONFIG_MAPPING

    model_type = config_dict.pop("model_type")
    model_type = REMOTE_CODE.get(model_type, model_type)
    config = CONFIG_MAPPING[model_type].from_dict(config_dict)
    # Qwen Omni: the thinker's text model, which no AutoModel builds from its config.
    thinker = getattr(config, "thinker_config", config)
    text = getattr(thinker, "text_config", None) if model_type in THINKERS else None
    text = text or config.get_text_config()
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if model_type in THINKERS:
            module = importlib.import_module(type(text).__module__.replace("configuration_",
                                                                             "modeling_"))
            model = getattr(module, THINKERS[model_type])(text)
        else:
            try:
                model = AutoModel.from_config(text)
            except ValueError:  # a text config with no AutoModel: its module's text model
                module = importlib.import_module(type(text).__module__.replace("configuration_",
                                                                                 "modeling_"))
                named = getattr(module, type(text).__name__.replace("Config", "Model"), None)
                model = named(text) if named is not None else AutoModel.from_config(config)
    if hasattr(model, "L_module"):  # HRM-Text: a cache slot per run of a stack's layer
        layers = hrm_slots(text, model)
    else:
        layers = decoder_layers(model)
    if layers and isinstance(getattr(layers[0], "self_attn", None), torch.nn.ModuleList):
        # LongCat-Flash: two latent attentions a decoder layer, caching at 2i and 2i + 1
        layers = [types.SimpleNamespace(self_attn=attention)
                  for layer in layers for attention in layer.self_attn]
    expected = getattr(text, "num_blocks", None) or text.num_hidden_layers  # xLSTM: num_blocks
    if len(layers) != expected:
        raise RuntimeError(f"found {len(layers)} decoder layers, not {expected}")
    layer_types = getattr(text, "layer_types", None)
    facts = []
    rwkv = None
    for i, layer in enumerate(layers):
        recurrent = getattr(layer, "linear_attn", None)
        if recurrent is not None:
            facts.append(state_facts(text, recurrent))
            continue
        short_conv = getattr(layer, "conv", None)  # LFM2: a conv layer
        if short_conv is not None and not getattr(layer, "is_attention_layer", True):
            channels, _, kernel = short_conv.conv.weight.shape
            facts.append(dict(NO_MIXER, kind="state", conv_state_bytes=(kernel - 1) * channels * 2))
            continue
        shared = getattr(layer, "shared_transformer", None) or getattr(layer, "shared_transf", None)
        if shared is not None:  # Zamba2's and Zamba's hybrid blocks: attention, then Mamba
            facts.append(hybrid_facts(text, i, shared.self_attn, layer.mamba_decoder.mamba, facts))
            continue
        mamba = getattr(layer, "mamba", None)  # Granite 4.0-H, Jamba, Zamba; Falcon-H1: + attention
        if mamba is not None:
            beside = getattr(layer, "self_attn", None)
            facts.append(mamba_facts(text, mamba) if beside is None else
                         hybrid_facts(text, i, beside, mamba, facts))
            continue
        mlstm = getattr(layer, "mlstm_layer", None)  # xLSTM: per head C, n and m, in the state type
        if mlstm is not None:
            heads = text.num_heads
            qk, v = mlstm.qk_dim // heads, mlstm.v_dim // heads
            size = 4 if text.inference_state_dtype == "float32" else 2
            facts.append(dict(NO_MIXER, kind="state",
                              recurrent_state_bytes=heads * (qk * v + qk + 1) * size))
            continue
        time_mix = getattr(layer, "attention", None)  # RWKV: RwkvModel's five state tensors
        if hasattr(time_mix, "time_decay"):
            rwkv = rwkv or rwkv_facts(text)  # every block's alike: one forward for all
            facts.append(dict(rwkv))
            continue
        temporal = getattr(layer, "temporal_block", None)  # RecurrentGemma: RG-LRU or attention
        if temporal is not None and hasattr(temporal, "rg_lru"):
            channels, _, kernel = temporal.conv_1d.weight.shape  # its state: lru_width F32
            facts.append(dict(NO_MIXER, kind="state", conv_state_bytes=(kernel - 1) * channels * 2,
                              recurrent_state_bytes=4 * temporal.lru_width))
            continue
        if temporal is not None:
            facts.append(layer_facts(text, None, i, temporal, facts))
            continue
        mixer = getattr(layer, "mixer", None)  # Mamba, Falcon Mamba, Mamba2: every layer a mixer
        if getattr(layer, "block_type", None) is None and hasattr(mixer, "conv1d"):
            facts.append(mamba_facts(text, mixer))
            continue
        block = getattr(layer, "block_type", None)  # Nemotron-H: mamba, attention, moe, mlp
        if block in ("mamba", "moe", "mlp"):
            facts.append(mamba_facts(text, layer.mixer) if block == "mamba" else
                         dict(NO_MIXER))
            continue
        if block == "attention":
            facts.append(layer_facts(text, None, i, layer.mixer, facts))
            continue
        if hasattr(layer, "attn_alpha_factor"):  # MiniMax: lightning or softmax attention
            mixer = layer.self_attn
            if layer.layer_type == "linear_attention":  # its K^T V state, in the model's type
                facts.append(dict(NO_MIXER, kind="state", recurrent_state_bytes=2 *
                                  mixer.num_attention_heads * mixer.head_dim * mixer.head_dim))
            else:  # its mask slides for every softmax layer when sliding_window is set
                facts.append(layer_facts(text, None, i, mixer, facts))
            continue
        layer = getattr(layer, "norm_attn_norm", layer)  # DBRX: its norms and attention
        attention = next(getattr(layer, name) for name in
                         ("self_attn", "attention", "attn", "self_attention")
                         if getattr(layer, name, None) is not None)
        attention = getattr(attention, "attention", attention)  # GPT-Neo: global or local
        facts.append(layer_facts(text, layer_types, i, attention, facts))
    # Mamba, Falcon Mamba and Mamba2 name no context (a file may state one).
    return getattr(text, "max_position_embeddings", None), facts


def hrm_slots(text, model):
    """HRM-Text's attention calls in the order of their cache slots (HrmTextModel.forward): for
    each H cycle, L_cycles runs of the L stack, then one of the H stack; each call caches under
    layer_idx + its run's offset, so each run of a layer is a layer of its own."""
    runs = [model.L_module] * text.L_cycles + [model.H_module]
    return [layer for _ in range(text.H_cycles) for stack in runs for layer in stack.layers]


def rwkv_facts(text):
    """An RWKV block's state as RwkvModel allocates it for use_cache: five tensors of
    hidden_size per layer, the two token shifts in the model's type (BF16 here), the WKV
    numerator, denominator and maximum in float32."""
    import torch
    from transformers.models.rwkv import modeling_rwkv
    with torch.device("meta"):
        model = modeling_rwkv.RwkvModel(text)
        out = model(input_ids=torch.zeros(1, 1, dtype=torch.long), use_cache=True)
    shift, wkv = out.state[:2], out.state[2:]  # each (batch, channels, layers)
    if any(s.dtype != model.dtype for s in shift) or any(s.dtype != torch.float32 for s in wkv):
        raise RuntimeError("RWKV's token shifts are not in the model's type, or its WKV state "
                           "not in float32")
    return dict(NO_MIXER, kind="state", conv_state_bytes=2 * sum(s.shape[1] for s in shift),
                recurrent_state_bytes=4 * sum(s.shape[1] for s in wkv))


def decoder_layers(model):
    for holder in (model, getattr(model, "model", None), getattr(model, "language_model", None),
                   getattr(model, "decoder", None)):  # OPT: model.decoder.layers
        if holder is not None and hasattr(holder, "layers"):
            return list(holder.layers)
        if holder is not None and hasattr(holder, "h"):  # GPT-2, GPT-J, GPT-Neo, Falcon, ...
            return list(holder.h)
        if holder is not None and hasattr(holder, "blocks"):  # xLSTM
            return list(holder.blocks)
    raise RuntimeError(f"no decoder layers in {type(model).__name__}")


class Unplanned(Exception):
    """A layer type transformers builds that kvring does not plan (kvring-plan must refuse)."""


KINDS = {"full_attention": "global", "sliding_attention": "sliding",
         "chunked_attention": "chunked", "attention": "global",
         "deepseek_sparse_attention": "global"}  # DSA: MLA with an indexer (below)

NO_STATE = {"conv_state_bytes": 0, "recurrent_state_bytes": 0, "indexer_dim": 0}


NO_MIXER = {"kind": "none", "window": 0, "chunk": 0, "owner": None, "num_kv_heads": 0,
            "head_dim": 0, "v_head_dim": 0, "latent_dim": 0, **NO_STATE}


def mamba_facts(text, mixer):
    """A Mamba block's state from its mixer: the conv1d's channels and kernel (engines keep
    kernel - 1 columns, BF16) and the SSM state of heads x head_dim x state_size (Mamba2) or
    intermediate_size x state_size (Mamba1, whose mixer has no heads)."""
    channels, _, kernel = mixer.conv1d.weight.shape
    dtype = getattr(text, "mamba_ssm_cache_dtype", None) or "bfloat16"
    width = (mixer.num_heads * mixer.head_dim if hasattr(mixer, "num_heads")
             else mixer.intermediate_size)
    return dict(NO_MIXER, kind="state", conv_state_bytes=(kernel - 1) * channels * 2,
                recurrent_state_bytes=width * mixer.ssm_state_size
                * (4 if dtype == "float32" else 2))


def hybrid_facts(text, i, attention, mixer, earlier):
    """A layer that attends and keeps a Mamba state (Falcon-H1, Zamba's hybrid blocks): the
    attention's facts with the mixer's state bytes."""
    state = mamba_facts(text, mixer)
    return dict(layer_facts(text, None, i, attention, earlier),
                conv_state_bytes=state["conv_state_bytes"],
                recurrent_state_bytes=state["recurrent_state_bytes"])


def state_facts(text, module):
    """A Gated DeltaNet layer's state from its module: the conv1d's channels and kernel (engines
    keep kernel - 1 columns, in BF16) and the recurrent state of v_heads x k_dim x v_dim."""
    if hasattr(module, "conv1d"):
        channels, _, kernel = module.conv1d.weight.shape
    else:  # OLMo hybrid: q, k and v convolutions of their own
        shapes = [conv.weight.shape for conv in (module.q_conv1d, module.k_conv1d, module.v_conv1d)]
        channels, kernel = sum(shape[0] for shape in shapes), shapes[0][2]
    state_bytes = 4 if getattr(text, "mamba_ssm_dtype", None) == "float32" else 2
    return {"kind": "state", "window": 0, "chunk": 0, "owner": None, "num_kv_heads": 0,
            "head_dim": 0, "v_head_dim": 0, "latent_dim": 0, "indexer_dim": 0,
            "conv_state_bytes": (kernel - 1) * channels * 2,
            "recurrent_state_bytes": module.num_v_heads * module.head_k_dim * module.head_v_dim
            * state_bytes}


def layer_facts(text, layer_types, i, attention, earlier):
    kind = layer_types[i] if layer_types else None
    if kind is not None and kind not in KINDS:
        raise Unplanned(kind)
    window = getattr(text, "sliding_window", None)
    if kind is None and getattr(attention, "attention_type", None) in ("global", "local"):
        kind = "sliding_attention" if attention.attention_type == "local" else "full_attention"
        window = text.window_size  # GPT-Neo's local layers
    if kind is None:  # classes without layer_types: Mistral-like windows on every layer
        kind = "sliding_attention" if window else "full_attention"
    fact = {"kind": KINDS[kind],
            "window": window if kind == "sliding_attention" else 0,
            "chunk": text.attention_chunk_size if kind == "chunked_attention" else 0,
            "owner": i, **NO_STATE}
    if getattr(text, "kv_lora_rank", None):
        # DSA: a layer whose indexer runs caches its key (wk's width) beside the latent.
        indexer = getattr(attention, "indexer", None)
        fact["indexer_dim"] = indexer.wk.out_features if indexer is not None else 0
        if MLA == "latent":  # engines cache the latent and the RoPE key
            fact.update(latent_dim=text.kv_lora_rank + text.qk_rope_head_dim, num_kv_heads=0,
                        head_dim=0, v_head_dim=0)
        else:  # transformers' cache: per query head, K of qk_head_dim and V of v_head_dim
            fact.update(latent_dim=0, num_kv_heads=attention.num_heads,
                        head_dim=attention.qk_head_dim, v_head_dim=attention.v_head_dim)
        return fact
    if getattr(attention, "is_kv_shared_layer", False):
        owner = getattr(attention, "kv_shared_layer_index", None)  # Gemma 3n
        if owner is None:  # Gemma 4: the last earlier layer of the kind that stores its KV
            owner = max(j for j in range(i) if earlier[j]["owner"] == j
                        and layer_types[j] == kind)
        shared = dict(earlier[owner])
        shared.update(owner=owner, kind=fact["kind"], window=fact["window"], chunk=fact["chunk"])
        return shared
    head_dim = (getattr(attention, "head_dim", None) or getattr(attention, "head_size", None)
                or text.hidden_size // text.num_attention_heads)  # GPT-NeoX: head_size; GPT-1
    fused = next((getattr(attention, name) for name in ("qkv_proj", "c_attn", "query_key_value",
                                                         "Wqkv")
                  if hasattr(attention, name)), None)
    if fused is not None:  # Phi-3, GPT-2, GPT-NeoX, Falcon, DBRX: q, k and v in one matrix
        out = getattr(fused, "out_features", None) or fused.nf  # GPT-2's Conv1D: nf
        kv_heads = (out // head_dim - text.num_attention_heads) // 2
        fact.update(latent_dim=0, num_kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim)
        return fact
    if hasattr(attention, "kv_proj"):  # JetMoE: k and v in one matrix
        kv_heads = attention.kv_proj.out_features // (2 * head_dim)
        fact.update(latent_dim=0, num_kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim)
        return fact
    unwrap = lambda proj: getattr(proj, "linear", proj)  # Kyutai's: nn.Linear inside
    k_out = unwrap(attention.k_proj).out_features
    v_proj = unwrap(getattr(attention, "v_proj", None))
    kv_heads = k_out // head_dim
    fact.update(latent_dim=0, num_kv_heads=kv_heads, head_dim=head_dim,
                v_head_dim=(v_proj.out_features // kv_heads) if v_proj is not None else head_dim)
    return fact


MLA = "latent"  # --mla
NO_CONTEXT = 4096  # the context a model that names none is planned at

# Families whose published files name transformers classes through remote code: Kimi K2's
# configuration_deepseek.DeepseekV3Config.
REMOTE_CODE = {"kimi_k2": "deepseek_v3"}

# Families of remote code only, which transformers 5.12 cannot read: kvring-plan reads them by
# the checkpoints' own configuration and modeling code; their tests work each figure out by hand.
REMOTE_ONLY = {"kimi_linear", "mimo_v2_flash", "minimax_m1", "longcat_flash_ngram"}


def kvring_layers(binary, path, context=None):
    extra = ["--context", str(context)] if context is not None else []
    run = subprocess.run([binary, "--config", path, "--json", "--mla", MLA, *extra],
                         capture_output=True, text=True)
    if run.returncode != 0:
        return run.returncode, run.stderr.strip(), None
    plan = json.loads(run.stdout)
    keys = ("kind", "window", "chunk", "owner", "num_kv_heads", "head_dim", "v_head_dim",
            "latent_dim", "conv_state_bytes", "recurrent_state_bytes", "indexer_dim")
    return 0, plan["context"], [{key: layer[key] for key in keys} for layer in plan["layers"]]


def check(binary, path):
    """Returns (the differences for one file as lines, what both did)."""
    status, context_or_error, kvring = kvring_layers(binary, path)
    with open(path, encoding="utf-8") as file:
        try:
            model_type = json.load(file).get("model_type")
        except (ValueError, AttributeError):
            model_type = None
    if model_type in REMOTE_ONLY:
        verdict = "read" if status == 0 else f"refused ({context_or_error})"
        return [], f"{verdict} by kvring-plan; remote code transformers 5.12 does not carry"
    dropped = []
    try:
        context, reference = transformers_layers(path, dropped)
    except Unplanned as kind:
        if status == 2:
            return [], f"read by transformers (layer type {kind}), refused by kvring-plan " \
                       f"({context_or_error})"
        return [f"{path}: transformers builds layer type {kind}, but kvring-plan exits "
                f"{status}"], ""
    except Exception as error:  # transformers refuses the file
        if status == 2:
            return [], f"refused by both ({type(error).__name__}; {context_or_error})"
        return [f"{path}: transformers refuses it ({type(error).__name__}: {error}), "
                f"but kvring-plan exits {status}"], ""
    if status == 2 and (context is not None or "give --context" not in context_or_error):
        # kvring-plan refuses more than transformers (it does not guess)
        return [], f"read by transformers, refused by kvring-plan ({context_or_error})"
    if status not in (0, 2):
        return [f"{path}: kvring-plan exits {status}: {context_or_error}"], ""
    differences = []
    note = ""
    if context is None:  # the model names no context: planned at one given with --context
        if status != 2 or "give --context" not in context_or_error:
            return [f"{path}: transformers names no context, but kvring-plan without --context "
                    f"exits {status}"], ""
        context = NO_CONTEXT
        status, context_or_error, kvring = kvring_layers(binary, path, context)
        note = f" (no context named: refused without --context, planned at {context})"
    if status != 0:
        return [f"{path}: kvring-plan --context {context} exits {status}: {context_or_error}"], ""
    if context_or_error != context:
        differences.append(f"{path}: context {context_or_error}, transformers {context}")
    if len(kvring) != len(reference):
        return differences + [f"{path}: {len(kvring)} layers, transformers {len(reference)}"], ""
    for i, (ours, theirs) in enumerate(zip(kvring, reference)):
        for key, value in theirs.items():
            if value is not None and ours[key] != value:
                differences.append(f"{path}: layer {i} {key} {ours[key]}, transformers {value}")
    if dropped:
        note += f" (without {', '.join(dropped)}: transformers refuses the file's value)"
    return differences, f"same {len(reference)} layers{note}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kvring-plan", required=True, help="the kvring-plan binary")
    parser.add_argument("--mla", choices=("latent", "expanded"), default="latent",
                        help="how kvring-plan plans MLA layers (transformers caches expanded)")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    global MLA
    MLA = args.mla
    import transformers
    print(f"transformers {transformers.__version__}", flush=True)
    failures = 0
    for path in args.files:
        differences, verdict = check(args.kvring_plan, path)
        for line in differences:
            print(line, flush=True)
        if differences:
            failures += 1
        else:
            print(f"ok {path}: {verdict}", flush=True)
    print(f"{len(args.files) - failures} of {len(args.files)} files agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
