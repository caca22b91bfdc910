#!/usr/bin/env python3
"""Writes what transformers' attention computes on tiny random-weight models, for kvring's test.

For each family below, a model of a few layers with small windows (or chunks) is built from a
config.json written here, its weights drawn from a fixed seed, and a prompt long enough to wrap
every ring several times runs through it once (eager attention). Each decoder layer's attention
call is captured: the queries after RoPE and norms, the keys and values it attends (a shared-KV
layer's are its owner's), the scale, soft-cap and sinks, and the output before o_proj: in
eager_attention_forward, or where a family computes attention itself (torch's SDPA for
RecurrentGemma, an _attn method for GPT-Neo and GPT-J). Inside each call the keys and values
are rounded to BF16 first, as kvring stores them, so the outputs of the two differ by float32
arithmetic only. MLA layers also keep their stored latent, and DSA layers their indexer's keys.
The fixture (one JSON file per family) holds the config, those arrays and the versions used; the
C++ test (tests/transformers_semantics_test.cc) plans the config with kvring, appends the K/V
a few positions at a time so the rings wrap, attends the same queries, and compares.

Run in the chroot of tools/transformers/README.md (run.sh --fixtures does it):
    python3 attention_fixtures.py OUT_DIR
"""

import base64
import importlib
import json
import os
import sys

import torch

SEED = 1234
PROMPT = 40  # positions: every ring below (windows and chunks 6-12) wraps 3-6 times

S, F, C = "sliding_attention", "full_attention", "chunked_attention"
BASE = {"hidden_size": 64, "intermediate_size": 64, "vocab_size": 97, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False}

# Each family: what differs from BASE, and what the fixture tests in kvring's terms.
FAMILIES = {
    "mistral": dict(num_hidden_layers=2, sliding_window=7),
    "qwen2": dict(num_hidden_layers=3, use_sliding_window=True, sliding_window=6,
                  max_window_layers=1),
    "gemma2": dict(num_hidden_layers=3, sliding_window=8, query_pre_attn_scalar=24,
                   attn_logit_softcapping=10.0, final_logit_softcapping=None),
    "gemma3_text": dict(num_hidden_layers=4, sliding_window=9, sliding_window_pattern=3,
                        query_pre_attn_scalar=16),
    "gemma3n_text": dict(num_hidden_layers=6, sliding_window=8, num_kv_shared_layers=2,
                         layer_types=[S, S, F, S, S, F], intermediate_size=[64] * 6,
                         activation_sparsity_pattern=[0.0] * 6, hidden_size_per_layer_input=8,
                         vocab_size_per_layer_input=97, laurel_rank=4, altup_num_inputs=2),
    "gemma4_text": dict(num_hidden_layers=6, sliding_window=10, global_head_dim=32,
                        num_key_value_heads=2, num_global_key_value_heads=1,
                        attention_k_eq_v=True, num_kv_shared_layers=2,
                        layer_types=[S, S, F, S, S, F], hidden_size_per_layer_input=8,
                        vocab_size_per_layer_input=97),
    "gemma4_unified_text": dict(num_hidden_layers=6, sliding_window=10, global_head_dim=32,
                                num_key_value_heads=2, num_global_key_value_heads=1,
                                attention_k_eq_v=True, num_kv_shared_layers=2,
                                layer_types=[S, S, F, S, S, F]),
    "llama4_text": dict(num_hidden_layers=3, attention_chunk_size=8, no_rope_layers=[1, 1, 0],
                        num_local_experts=2, num_experts_per_tok=1, intermediate_size_mlp=64,
                        interleave_moe_layer_step=1, attn_temperature_tuning=False),
    "gpt_oss": dict(num_hidden_layers=2, sliding_window=6, num_local_experts=2,
                    num_experts_per_tok=1),
    "cohere2": dict(num_hidden_layers=4, sliding_window=7, sliding_window_pattern=2,
                    head_dim=16),
    "olmo3": dict(num_hidden_layers=4, sliding_window=11),
    "smollm3": dict(num_hidden_layers=4, use_sliding_window=True, sliding_window=12,
                    no_rope_layers=[1, 0, 1, 0]),
    # Families whose layer rules kvring reads from their own keys (docs/configs.md).
    "exaone4": dict(num_hidden_layers=4, sliding_window=7, sliding_window_pattern=2),
    "cwm": dict(num_hidden_layers=5, sliding_window=6),
    "mixtral": dict(num_hidden_layers=2, sliding_window=7, num_local_experts=2,
                    num_experts_per_tok=1),
    "phi3": dict(num_hidden_layers=2, sliding_window=8),
    "starcoder2": dict(num_hidden_layers=2, sliding_window=9),
    "qwen2_moe": dict(num_hidden_layers=4, use_sliding_window=True, sliding_window=6,
                      max_window_layers=3, num_experts=2, num_experts_per_tok=1,
                      moe_intermediate_size=32, shared_expert_intermediate_size=32),
    "qwen3_moe": dict(num_hidden_layers=2, use_sliding_window=True, sliding_window=7,
                      num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32),
    "cohere2_moe": dict(num_hidden_layers=5, sliding_window=7, sliding_window_pattern=2,
                        first_k_dense_replace=1, prefix_dense_intermediate_size=64,
                        num_experts=2, num_experts_per_tok=1),
    "dots1": dict(num_hidden_layers=4, sliding_window=6, max_window_layers=2,
                  first_k_dense_replace=4, n_routed_experts=2, num_experts_per_tok=1),
    "vaultgemma": dict(num_hidden_layers=3, sliding_window=8, query_pre_attn_scalar=24,
                       attn_logit_softcapping=10.0, final_logit_softcapping=None),
    "afmoe": dict(num_hidden_layers=4, sliding_window=9, global_attn_every_n_layers=2,
                  num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32),
    "ministral": dict(num_hidden_layers=4, sliding_window=7, layer_types=[F, S, S, F]),
    "mellum": dict(num_hidden_layers=3, sliding_window=6, layer_types=[S, S, F]),
    "laguna": dict(num_hidden_layers=3, sliding_window=8, num_attention_heads_per_layer=[4, 2, 6],
                   layer_types=[S, F, S], num_experts=2, num_experts_per_tok=1,
                   moe_intermediate_size=32, shared_expert_intermediate_size=32),
    "qwen3": dict(num_hidden_layers=3, use_sliding_window=True, sliding_window=7,
                  max_window_layers=1),
    "phimoe": dict(num_hidden_layers=2, sliding_window=8, num_local_experts=2,
                   num_experts_per_tok=1),
    "phi4_multimodal": dict(num_hidden_layers=2, sliding_window=9),
    "ministral3": dict(num_hidden_layers=2, sliding_window=6),
    "exaone_moe": dict(num_hidden_layers=5, sliding_window=7, sliding_window_pattern=3,
                       first_k_dense_replace=1, moe_intermediate_size=32, num_experts=2,
                       num_experts_per_tok=1),
    "seed_oss": dict(num_hidden_layers=2),
    "ernie4_5": dict(num_hidden_layers=2),
    # Granite 4.0 Vision's text model: scaled by attention_multiplier, as Granite.
    "granite4_vision_text": dict(num_hidden_layers=2, attention_multiplier=0.2),
    # HRM-Text: 2 layers a stack run 2 x (1 + 1) times: 8 cache slots, each an attention call.
    "hrm_text": dict(num_hidden_layers=2, H_cycles=2, L_cycles=1),
    # Hybrids: their recurrent layers make no attention call (the fixture marks them "state");
    # their attention layers are checked as the others, at the places kvring plans them.
    "qwen3_next": dict(num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=4,
                       linear_key_head_dim=16, linear_value_head_dim=16,
                       linear_conv_kernel_dim=4, num_experts=2, num_experts_per_tok=1,
                       moe_intermediate_size=32, shared_expert_intermediate_size=32),
    "olmo_hybrid": dict(num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=2,
                        linear_key_head_dim=16, linear_value_head_dim=16),
    "lfm2": dict(num_hidden_layers=4, conv_L_cache=3, full_attn_idxs=[1, 3]),
    "granitemoehybrid": dict(num_hidden_layers=4, mamba_n_heads=4, mamba_d_state=8,
                             mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2,
                             mamba_d_head=32, layer_types=["mamba", "attention", "mamba",
                                                           "attention"],
                             num_local_experts=2, num_experts_per_tok=1),
    "falcon_h1": dict(num_hidden_layers=2, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head="auto",
                      mamba_n_groups=1, mamba_d_state=8, mamba_d_conv=4),
    "jamba": dict(num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1,
                  expert_layer_period=2, expert_layer_offset=1, num_experts=2,
                  num_experts_per_tok=1, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
                  use_mamba_kernels=False),
    "bamba": dict(num_hidden_layers=4, attn_layer_indices=[1, 3], mamba_n_heads=4,
                  mamba_n_groups=1, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
                  mamba_d_head=32),
    "minimax": dict(num_hidden_layers=4, num_local_experts=2, num_experts_per_tok=1,
                    block_size=8, layer_types=["linear_attention", "full_attention",
                                               "linear_attention", "full_attention"]),
    "lfm2_moe": dict(num_hidden_layers=4, conv_L_cache=3, num_dense_layers=1, num_experts=2,
                     num_experts_per_tok=1, moe_intermediate_size=32,
                     layer_types=["conv", "full_attention", "conv", "full_attention"]),
    "nemotron_h": dict(num_hidden_layers=5, layers_block_type=["mamba", "attention", "mlp",
                                                               "moe", "attention"],
                       ssm_state_size=8, mamba_num_heads=4, mamba_head_dim=32, n_groups=1,
                       conv_kernel=4, expand=2, chunk_size=8, n_routed_experts=2,
                       num_experts_per_tok=1, moe_intermediate_size=32,
                       moe_shared_expert_intermediate_size=32, use_mamba_kernels=False),
    # Zamba's and Zamba2's shared attention blocks: one module (two in Zamba2, alternating)
    # attends at every hybrid layer, over the hidden state and the embeddings side by side
    # (head dim 2 x 64 / 4), each layer with K/V of its own (Zamba2's adapters add a per-layer
    # term to q and k; they need as many KV heads as heads, as its checkpoints have, and each
    # hybrid layer's block, layer % num_mem_blocks, to be its hybrid index's, as here).
    "zamba": dict(num_hidden_layers=5, attn_layer_period=2, attn_layer_offset=1,
                  n_mamba_heads=2, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
                  use_mamba_kernels=False),
    "zamba2": dict(num_hidden_layers=5, num_key_value_heads=4,
                   layers_block_type=["hybrid", "mamba", "mamba", "hybrid", "hybrid"],
                   num_mem_blocks=2, use_shared_attention_adapter=True, adapter_rank=8,
                   use_mem_rope=True, n_mamba_heads=4, mamba_d_state=8, mamba_d_conv=4,
                   mamba_expand=2, chunk_size=8, use_mamba_kernels=False),
    # RecurrentGemma's local attention calls torch's SDPA itself (captured there, not in
    # eager_attention_forward); one KV head.
    "recurrent_gemma": dict(num_hidden_layers=6, attention_window_size=7, num_key_value_heads=1,
                            block_types=["recurrent", "recurrent", "attention"], lru_width=64),
    # GPT-style families (their own keys, as attribute_map aliases BASE's; K/V heads by their
    # attention's rule, so no num_key_value_heads). GPT-Neo's local layers slide over
    # window_size positions, at scale 1; GPT BigCode keeps one K/V head (multi_query).
    "gpt_neo": dict(num_hidden_layers=4, attention_types=[[["global", "local"], 2]],
                    window_size=7),
    "gpt2": dict(num_hidden_layers=2),
    "gpt_bigcode": dict(num_hidden_layers=2, multi_query=True),
    "gptj": dict(num_hidden_layers=2, rotary_dim=8),
    "gpt_neox": dict(num_hidden_layers=2, rotary_pct=0.5),
    "opt": dict(num_hidden_layers=2, ffn_dim=64, word_embed_proj_dim=64),
    # JetMoE: 2 K/V heads of kv_channels 16, queries from 2 of 4 attention experts: 4 heads.
    "jetmoe": dict(num_hidden_layers=2, num_key_value_heads=2, kv_channels=16,
                   num_local_experts=4, num_experts_per_tok=2),
    # ModernBERT's decoder: full iff i % global_attn_every_n_layers == 0, the others sliding
    # over local_attention / 2 positions.
    "modernbert-decoder": dict(num_hidden_layers=4, local_attention=14,
                               global_attn_every_n_layers=2, cls_token_id=1, sep_token_id=2),
    # Falcon: 40B's new_decoder_architecture (2 K/V heads of 4 query heads), and multi-query.
    "falcon": dict(num_hidden_layers=2, new_decoder_architecture=True, num_kv_heads=2),
    "persimmon": dict(num_hidden_layers=2),
    "biogpt": dict(num_hidden_layers=2),
    # XGLM: its attention computes inline (follow_inline_attention), queries scaled first.
    "xglm": dict(num_hidden_layers=2),
    "dbrx": dict(num_hidden_layers=2,
                 attn_config={"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 10000.0},
                 ffn_config={"hidden_size": 64, "ffn_hidden_size": 64, "moe_num_experts": 2,
                             "moe_top_k": 1}),
    "chameleon": dict(num_hidden_layers=2, vocabulary_map={"<image>": 3}),
    "aria_text": dict(num_hidden_layers=2, moe_num_experts=2, moe_topk=1,
                      moe_intermediate_size=32),
    # MLA, with YaRN's attention scale (mscale_all_dim) as DeepSeek V3 publishes it; dense MLPs.
    "deepseek_v3": dict(num_hidden_layers=2, num_key_value_heads=4, kv_lora_rank=32,
                        q_lora_rank=None, qk_nope_head_dim=16, qk_rope_head_dim=16,
                        v_head_dim=16, first_k_dense_replace=2, n_routed_experts=2,
                        num_experts_per_tok=1, n_group=1, topk_group=1,
                        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                         "factor": 4.0, "original_max_position_embeddings": 16,
                                         "mscale": 1.0, "mscale_all_dim": 1.0,
                                         "beta_fast": 32.0, "beta_slow": 1.0}),
    # The other MLA families, at their own defaults of scale and RoPE (no YaRN).
    "deepseek_v2": dict(num_hidden_layers=2, num_key_value_heads=4, kv_lora_rank=32,
                        q_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=24,
                        first_k_dense_replace=2, n_routed_experts=2, num_experts_per_tok=1,
                        moe_intermediate_size=32),
    "glm4_moe_lite": dict(num_hidden_layers=2, num_key_value_heads=4, kv_lora_rank=48,
                          q_lora_rank=None, qk_nope_head_dim=24, qk_rope_head_dim=16,
                          head_dim=16, v_head_dim=32, mlp_layer_types=["dense", "dense"],
                          n_routed_experts=2, num_experts_per_tok=1, moe_intermediate_size=32),
    "youtu": dict(num_hidden_layers=2, num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=24,
                  qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16),
    # LongCat-Flash: one decoder layer of two latent attentions (cache slots 0 and 1), its
    # queries and latent scaled by (hidden / rank)^0.5.
    "longcat_flash": dict(num_layers=1, num_key_value_heads=4, kv_lora_rank=32, q_lora_rank=32,
                          qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16,
                          ffn_hidden_size=64, expert_ffn_hidden_size=32, n_routed_experts=2,
                          zero_expert_num=1, moe_topk=2),
    "mistral4": dict(num_hidden_layers=2, num_key_value_heads=4, kv_lora_rank=32,
                     q_lora_rank=None, qk_nope_head_dim=16, qk_rope_head_dim=16, head_dim=32,
                     v_head_dim=16, first_k_dense_replace=2, n_routed_experts=2,
                     num_experts_per_tok=1, moe_intermediate_size=32),
    # DeepSeek V3.2's sparse attention: the indexer's top-k (64) covers the whole 40-position
    # prompt, so every layer attends all of its past, as kvring plans it (docs/planning.md).
    "deepseek_v32": dict(num_hidden_layers=2, num_key_value_heads=4, kv_lora_rank=32,
                         q_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=16,
                         v_head_dim=16, first_k_dense_replace=2, mlp_layer_types=["dense"] * 2,
                         n_routed_experts=2, num_experts=2, num_experts_per_tok=1,
                         moe_intermediate_size=32, index_topk=64, index_head_dim=16,
                         index_n_heads=2),
    "glm_moe_dsa": dict(num_hidden_layers=2, num_key_value_heads=4, kv_lora_rank=48,
                        q_lora_rank=24, qk_nope_head_dim=24, qk_rope_head_dim=16, head_dim=16,
                        v_head_dim=32, first_k_dense_replace=2, mlp_layer_types=["dense"] * 2,
                        n_routed_experts=2, num_experts=2, num_experts_per_tok=1,
                        moe_intermediate_size=32, index_topk=64, index_head_dim=16,
                        index_n_heads=2),
    # Families whose every layer attends fully: what their classes give the heads, head size,
    # scale and soft-cap (MoE families with two small experts; dense where a key allows).
    **{family: dict(num_hidden_layers=2) for family in (
        "llama", "gemma", "olmo", "olmo2", "granite", "cohere", "glm", "glm4", "stablelm",
        "helium", "apertus", "arcee", "hunyuan_v1_dense", "jais2", "nanochat", "bitnet", "phi",
        "hyperclovax", "gpt-sw3", "gpt_neox_japanese", "emu3_text_model", "qwen3_vl_text")},
    **{family: dict(num_hidden_layers=2, num_experts=2, num_experts_per_tok=1,
                    moe_intermediate_size=32) for family in (
        "olmoe", "flex_olmo", "granitemoe", "granitemoeshared", "ernie4_5_moe",
        "hunyuan_v1_moe", "minimax_m2", "solar_open", "hy_v3", "glm4_moe", "qwen3_vl_moe_text")},
    "codegen": dict(num_hidden_layers=2, rotary_dim=8),
    "nemotron": dict(num_hidden_layers=2),
    "deepseek_ocr2_text": dict(num_hidden_layers=2, mlp_layer_types=["dense", "dense"]),
    # Multimodal RoPE (its sections summing to half the rotated dims).
    **{family: dict(num_hidden_layers=2, rope_parameters={
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]})
       for family in ("glm4v_text", "glm_ocr_text", "paddleocr_vl_text", "qwen2_vl_text",
                      "qwen2_5_vl_text")},
    "glm4v_moe_text": dict(num_hidden_layers=2, n_routed_experts=2, num_experts_per_tok=1,
                           moe_intermediate_size=32, rope_parameters={
                               "rope_type": "default", "rope_theta": 10000.0,
                               "mrope_section": [1, 1, 2]}),
    "ernie4_5_vl_moe_text": dict(num_hidden_layers=2, moe_num_experts=2, moe_k=1,
                                 moe_num_shared_experts=1, moe_intermediate_size=[32, 32],
                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                  "mrope_section": [3, 3, 2]}),
    # Qwen 3.5: Gated DeltaNet layers and full layers, 3 : 1.
    "qwen3_5_text": dict(num_hidden_layers=4, linear_num_key_heads=2, linear_num_value_heads=4,
                         linear_key_head_dim=16, linear_value_head_dim=16,
                         linear_conv_kernel_dim=4),
    "qwen3_5_moe_text": dict(num_hidden_layers=4, linear_num_key_heads=2,
                             linear_num_value_heads=4, linear_key_head_dim=16,
                             linear_value_head_dim=16, linear_conv_kernel_dim=4, num_experts=2,
                             num_experts_per_tok=1, moe_intermediate_size=32,
                             shared_expert_intermediate_size=32),
}


def config_of(model_type):
    config = dict(BASE, model_type=model_type)
    config.update(FAMILIES[model_type])
    if model_type in ("cohere2", "zamba", "zamba2", "falcon"):
        config.pop("head_dim")  # their classes derive it: 64 / 4 (Zamba's: 2 x 64 / 4)
    if model_type in GPT_STYLE:
        config.pop("num_key_value_heads")  # their attention's rule decides
    if model_type == "hrm_text":  # its attention keeps a K/V head per query head
        config.pop("num_key_value_heads")
    if model_type == "jetmoe":  # its class computes the query heads; head_dim is kv_channels
        config.pop("num_attention_heads")
        config.pop("head_dim")
    return config


# Attention modules that call torch's SDPA under attn_implementation "sdpa" (their eager path
# computes inline): Falcon's and Nemotron's, built with "sdpa" for the capture.
SDPA_MODULES = {"FalconAttention"}
SDPA_FAMILIES = ("falcon", "nemotron")  # Nemotron: its NemotronSdpaAttention

GPT_STYLE = ("gpt_neo", "gpt2", "gpt_bigcode", "gptj", "gpt_neox", "opt", "persimmon", "biogpt",
             "dbrx", "codegen", "gpt-sw3", "gpt_neox_japanese", "modernbert-decoder", "falcon",
             "xglm")
# Attention modules that compute inline, with separate q, k, v and out projections and no
# call a wrapper could take: followed through hooks on those projections.
INLINE_MODULES = {"XGLMAttention"}


class Capture:
    """Records each attention call of a forward pass, keyed by the module's layer index."""

    def __init__(self):
        self.calls = {}
        self.layer = None  # a shared block's layer, as its caller names it (Zamba, Zamba2)
        self.sdpa_module = None  # the attention module calling SDPA itself, while it runs

    def wrap_sdpa(self, sdpa):
        """As wrap, for a family whose attention module calls torch's SDPA itself
        (RecurrentGemma; Falcon and Nemotron built with SDPA attention): only inside a module
        follow_sdpa_modules entered."""
        def capture(query, key, value, attn_mask=None, dropout_p=0.0, scale=None, **kwargs):
            module = self.sdpa_module
            if module is None:
                return sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                            scale=scale, **kwargs)
            key = key.to(torch.bfloat16).to(key.dtype)
            value = value.to(torch.bfloat16).to(value.dtype)
            output = sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                          scale=scale, **kwargs)
            # K/V arrive repeated for each query head of a group (RecurrentGemma's repeat_kv,
            # Falcon's broadcast; Falcon's multi-query K/V once): keep one head a group.
            kv_heads = getattr(module, "num_kv_heads", None)
            groups = (key.shape[1] // kv_heads if kv_heads is not None
                      else module.num_key_value_groups)
            self.calls[module.layer_idx] = {
                "q": query[0].transpose(0, 1), "k": key[0, ::groups].transpose(0, 1),
                "v": value[0, ::groups].transpose(0, 1), "out": output[0].transpose(0, 1),
                "scale": float(scale if scale is not None else query.shape[-1] ** -0.5),
                "soft_cap": 0.0, "sinks": []}
            return output
        return capture

    def follow_sdpa_modules(self, model):
        """Marks the calls of attention modules that call SDPA themselves (see wrap_sdpa)."""
        def enter(module, args):
            self.sdpa_module = module

        def leave(module, args, output):
            self.sdpa_module = None
        modules = [module for module in model.modules()
                   if type(module).__name__.endswith("SdpaAttention")
                   or type(module).__name__ in SDPA_MODULES]
        return ([module.register_forward_pre_hook(enter) for module in modules] +
                [module.register_forward_hook(leave) for module in modules])

    def wrap_attn_method(self, attn):
        """As wrap, for a family whose attention module computes in a method of its own,
        _attn(query, key, value, attention_mask) (GPT-Neo: unscaled scores; GPT-J: divided
        by scale_attn; GPT-NeoX Japanese: by norm_factor)."""
        def capture(module, query, key, value, attention_mask=None, *args, **kwargs):
            key = key.to(torch.bfloat16).to(key.dtype)
            value = value.to(torch.bfloat16).to(value.dtype)
            output, weights = attn(module, query, key, value, attention_mask, *args, **kwargs)
            layer = getattr(module, "layer_idx", getattr(module, "layer_id", None))
            # GPT-J divides by scale_attn, GPT-NeoX Japanese by norm_factor; GPT-Neo by nothing.
            scale_attn = getattr(module, "scale_attn", getattr(module, "norm_factor", None))
            self.calls[layer] = {
                "q": query[0].transpose(0, 1), "k": key[0].transpose(0, 1),
                "v": value[0].transpose(0, 1), "out": output[0].transpose(0, 1),
                "scale": float(1.0 / scale_attn if scale_attn is not None else 1.0),
                "soft_cap": 0.0, "sinks": []}
            return output, weights
        return capture

    def follow_shared_blocks(self, model):
        """Keys a shared attention module's calls by the layer_idx its caller passes (Zamba's
        and Zamba2's modules attend at several layers, their own layer_idx fixed or -1)."""
        def enter(module, args, kwargs):
            self.layer = kwargs.get("layer_idx", args[1] if len(args) > 1 else None)
        return [module.register_forward_pre_hook(enter, with_kwargs=True)
                for name, module in model.named_modules()
                if name.endswith("self_attn") and "layer_idx" in
                module.forward.__code__.co_varnames[:module.forward.__code__.co_argcount]]

    def follow_cycle_offsets(self, model):
        """Keys HRM-Text's calls by their cache slot: each stack's attention module runs in
        several cycles, each caching under its layer_idx + the cycle_offset its caller passes."""
        def enter(module, args, kwargs):
            self.layer = module.layer_idx + kwargs.get("cycle_offset", 0)
        return [module.register_forward_pre_hook(enter, with_kwargs=True)
                for module in model.modules()
                if type(module).__name__.endswith("Attention") and "cycle_offset" in
                module.forward.__code__.co_varnames[:module.forward.__code__.co_argcount]]

    def follow_inline_attention(self, model):
        """For an attention module that computes inline (INLINE_MODULES): rounds its K and V
        projections' outputs to BF16 (so that it attends what kvring stores), and records its
        queries (q_proj's output, before the module multiplies it by its `scaling`), its K and V,
        and its output (out_proj's input), keyed by the module's layer_idx."""
        hooks = []
        for module in model.modules():
            if type(module).__name__ not in INLINE_MODULES:
                continue
            call = {"scale": float(module.scaling), "soft_cap": 0.0, "sinks": []}

            def heads(x, module=module):  # [1][T][H x D] -> [T][H][D]
                return x[0].reshape(x.shape[1], -1, module.head_dim)

            def record(name, call=call, heads=heads):
                def hook(projection, args, output):
                    if name != "q":
                        output = output.to(torch.bfloat16).to(output.dtype)
                    call[name] = heads(output)
                    return output
                return hook

            def finish(projection, args, module=module, call=call, heads=heads):
                call["out"] = heads(args[0])
                self.calls[module.layer_idx] = dict(call)
            hooks += [module.q_proj.register_forward_hook(record("q")),
                      module.k_proj.register_forward_hook(record("k")),
                      module.v_proj.register_forward_hook(record("v")),
                      module.out_proj.register_forward_pre_hook(finish)]
        return hooks

    def wrap(self, eager):
        def capture(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                    **kwargs):
            # kvring stores K/V in BF16 (rounded to nearest even): attend exactly those values,
            # so that the outputs differ from kvring's by f32 arithmetic only.
            if hasattr(module, "kv_b_proj"):
                # MLA: an engine stores the latent (rounded by the hook in run()) and the RoPE
                # key; K's other dims and V are exact functions of the stored latent.
                nope = module.qk_nope_head_dim
                rope = key[..., nope:].to(torch.bfloat16).to(key.dtype)
                key = torch.cat((key[..., :nope], rope), dim=-1)
            else:
                key = key.to(torch.bfloat16).to(key.dtype)
                value = value.to(torch.bfloat16).to(value.dtype)
            output, weights = eager(module, query, key, value, attention_mask, scaling=scaling,
                                    dropout=dropout, **kwargs)
            if scaling is None:
                scaling = module.head_dim ** -0.5
            softcap = kwargs.get("softcap", getattr(module, "attn_logit_softcapping", None))
            sinks = getattr(module, "sinks", None)
            # JetMoE repeats its K/V heads whole (query head h reads K/V head h % kv_heads),
            # not each head for a group of query heads: keep the heads it caches, and say so.
            tiled = hasattr(module, "kv_proj") and hasattr(module, "top_k")
            kv_heads = module.num_key_value_heads if tiled else key.shape[1]
            layer = self.layer if self.layer is not None else module.layer_idx
            self.calls[layer] = {
                "q": query[0].transpose(0, 1),  # [T][q heads][D]
                "k": key[0, :kv_heads].transpose(0, 1),  # [T][kv heads][D]
                "v": value[0, :kv_heads].transpose(0, 1),
                "out": output[0],               # [T][q heads][Dv]
                "scale": float(scaling),
                "soft_cap": float(softcap or 0.0),
                "sinks": sinks.tolist() if sinks is not None else [],
                "tiled_kv": tiled,
            }
            return output, weights
        return capture


def randomize(model, generator, model_type):
    """Draws every weight from N(0, 0.15^2), embeddings from N(0, 1) and norm scales near 1
    (Gemma's norms scale by 1 + weight): scores of a few units, so windows, scales, caps and
    sinks all show in the outputs."""
    offset = 0.0 if model_type.startswith("gemma") else 1.0
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if "norm" in name or (model_type in GPT_STYLE and "ln_" in name):  # GPT-2's ln_1
                parameter.copy_(offset + 0.1 * noise)
            else:
                parameter.copy_(noise * (1.0 if "embed" in name else 0.15))


def capture_indexer_keys(model, modeling):
    """Captures each DSA indexer's keys as its cache stores them (DeepSeek V3.2, GLM-5): its
    k_norm output with RoPE on the first qk_rope_head_dim dims, rounded to BF16. Returns the
    keys by layer ([T][index_head_dim], filled by the forward pass) and a function that
    removes the hooks."""
    keys, parts, current, hooks = {}, {}, {}, []
    rope = getattr(modeling, "apply_rotary_pos_emb", None)

    def rotate(q, k, cos, sin, *args, **kwargs):
        q, k = rope(q, k, cos, sin, *args, **kwargs)
        if "layer" in current:  # only the indexer's call: the attention's own is not kept
            parts[current["layer"]]["rot"] = k
        return q, k

    for index, layer in enumerate(getattr(model, "layers", [])):
        indexer = getattr(getattr(layer, "self_attn", None), "indexer", None)
        if indexer is None:
            continue

        def enter(module, args, index=index):
            current["layer"] = index
            parts[index] = {}

        def leave(module, args, output, index=index):
            del current["layer"]
            rot = parts[index]["rot"].squeeze(2)[0]  # [T][qk_rope_head_dim]
            rest = parts[index]["normed"][0, :, rot.shape[-1]:]
            keys[index] = torch.cat((rot, rest), dim=-1).to(torch.bfloat16).to(torch.float32)

        def normed(module, args, output, index=index):
            parts[index]["normed"] = output

        hooks += [indexer.register_forward_pre_hook(enter), indexer.register_forward_hook(leave),
                  indexer.k_norm.register_forward_hook(normed)]
    if hooks:
        modeling.apply_rotary_pos_emb = rotate

    def unhook():
        if hooks:
            modeling.apply_rotary_pos_emb = rope
        for hook in hooks:
            hook.remove()
    return keys, unhook


def encode(tensor):
    """Little-endian float32 values, base64: a fifth of the text of decimal numbers."""
    data = tensor.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
    return base64.b64encode(data).decode("ascii")


def run(model_type):
    from transformers import CONFIG_MAPPING, AutoModel
    config_dict = config_of(model_type)
    config = CONFIG_MAPPING[model_type].from_dict(dict(config_dict))
    implementation = "sdpa" if model_type in SDPA_FAMILIES else "eager"
    config._attn_implementation = implementation
    generator = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    try:
        model = AutoModel.from_config(config, attn_implementation=implementation).eval()
    except ValueError:  # a text config no AutoModel builds: its module's text model
        module = importlib.import_module(type(config).__module__.replace("configuration_",
                                                                           "modeling_"))
        model = getattr(module, type(config).__name__.replace("Config", "Model"))(config).eval()
    randomize(model, generator, model_type)
    modeling = importlib.import_module(type(model).__module__)
    capture = Capture()
    latents = {}
    hooks = []
    # MLA modules by the layer (cache slot) they attend as: LongCat-Flash has two a decoder
    # layer, at 2i and 2i + 1.
    mla_modules = {module.layer_idx: module for module in model.modules()
                   if hasattr(module, "kv_a_layernorm") and hasattr(module, "kv_b_proj")}
    for index, attention in mla_modules.items():
        def round_latent(module, inputs, output, index=index):
            # The compressed KV as an engine stores it: in BF16.
            rounded = output.to(torch.bfloat16).to(output.dtype)
            latents[index] = rounded[0]  # [T][kv_lora_rank]
            return rounded
        hooks.append(attention.kv_a_layernorm.register_forward_hook(round_latent))
    hooks += (capture.follow_shared_blocks(model) + capture.follow_sdpa_modules(model) +
              capture.follow_cycle_offsets(model) + capture.follow_inline_attention(model))
    indexer_keys, unhook_indexers = capture_indexer_keys(model, modeling)
    eager = getattr(modeling, "eager_attention_forward", None)
    if eager is not None:
        modeling.eager_attention_forward = capture.wrap(eager)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = capture.wrap_sdpa(sdpa)
    methods = {type(module) for module in model.modules() if hasattr(type(module), "_attn")}
    originals = {cls: cls._attn for cls in methods}
    for cls in methods:
        cls._attn = capture.wrap_attn_method(cls._attn)
    try:
        ids = torch.randint(3, config.vocab_size, (1, PROMPT), generator=generator)
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        if eager is not None:
            modeling.eager_attention_forward = eager
        torch.nn.functional.scaled_dot_product_attention = sdpa
        for cls, attn in originals.items():
            cls._attn = attn
        for hook in hooks:
            hook.remove()
        unhook_indexers()
    layers = []
    for index in range(config.num_hidden_layers):
        if index not in capture.calls:  # a recurrent layer of a hybrid: no attention call
            layers.append({"layer": index, "state": True})
            continue
        call = capture.calls[index]
        entry = {"layer": index, "scale": call["scale"], "soft_cap": call["soft_cap"],
                 "sinks": call["sinks"], **({"tiled_kv": True} if call.get("tiled_kv") else {}),
                 **{name: encode(call[name]) for name in ("q", "k", "v", "out")},
                 "shapes": {name: list(call[name].shape) for name in ("q", "k", "v", "out")}}
        if index in latents:  # MLA: the stored latent and the up-projection to absorb
            kv_b = mla_modules[index].kv_b_proj.weight  # [H x (nope + v)][rank]
            if hasattr(mla_modules[index], "mla_scale_kv_lora"):
                # LongCat-Flash scales the latent before kv_b_proj: folded in, as engines do.
                kv_b = kv_b * mla_modules[index].mla_scale_kv_lora
            entry.update(latent=encode(latents[index]), kv_b=encode(kv_b))
            entry["shapes"].update(latent=list(latents[index].shape), kv_b=list(kv_b.shape))
        if index in indexer_keys:  # DSA: the indexer's key of each position, after its RoPE
            entry.update(indexer_keys=encode(indexer_keys[index]))
            entry["shapes"].update(indexer_keys=list(indexer_keys[index].shape))
        layers.append(entry)
    import transformers
    return {"model_type": model_type, "transformers": transformers.__version__,
            "torch": torch.__version__, "seed": SEED, "positions": PROMPT,
            "config": config_dict, "layers": layers}


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    names = sys.argv[2:] or list(FAMILIES)
    for model_type in names:
        fixture = run(model_type)
        path = os.path.join(out_dir, model_type + ".json")
        with open(path, "w") as f:
            json.dump(fixture, f, indent=1)
        print(f"{path}: {len(fixture['layers'])} layers", flush=True)


if __name__ == "__main__":
    main()
