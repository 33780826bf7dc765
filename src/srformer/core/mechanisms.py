"""The entries of the cross-attention mechanisms the package ships: one :class:`~srformer.core.schema.Mechanism`
per variant, in the order the package lists them (:data:`srformer.core.registry.REGISTRY` is built from them).

Each mechanism is one module file in ``srformer/attention/`` with its own typed state (``docs/design.md``,
"Architecture"), and one float64 reference in ``srformer/attention/naive/``; its entry names them by import path
(``module``, ``state``, ``lean_state``, ``settings``, ``reference_path``) and states its capabilities and costs.
``full`` keeps the wrapped model's own attention (no module, no state of its own). ``docs/mechanisms.md`` lists
them with their sources and costs; ``docs/adding-a-mechanism.md`` says how to add one: one module file, its
reference and one entry appended to :data:`MECHANISMS` (a mechanism outside the package is registered with
:func:`srformer.core.registry.register` instead).

This module is data: it imports the schema only, never a mechanism.
"""

from __future__ import annotations

from srformer.core.schema import WEIGHTS_OF_SEGMENT, WEIGHTS_POOLED, Capabilities, Mechanism

__all__ = ["MECHANISMS"]

_SEGMENTED = "srformer.attention.segmented"
_NAIVE = "srformer.attention.naive"
_SUMMARY_STATE = "srformer.attention.summary.SummaryState"
_PAPER = "Long, Chowdhury & Roy, Segmented Recurrent Transformer"

MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism(
        name="full",
        doc="The model's unchanged cross attention: softmax over every encoder position.",
        citation=f"Vaswani et al. 2017, Attention Is All You Need; {_PAPER}, Eq. 1-2 and 5",
        module=None,
        state=None,
        lean_state=None,
        reference_path=f"{_NAIVE}.full_attention",
        capabilities=Capabilities(
            segment_free=True, lean_layout=False, state_grows_with_input=True, training_time_saving=False,
            has_softmax_part=True, recurrent_term=False, global_term=False,
        ),
        step_cost="O(k·d)",
        build_cost="none (keys/values projected once)",
        state_size="2·k·d (keys and values)",
        table1_row="Transformer",
    ),
    Mechanism(
        name="segmented",
        doc="Softmax over the scheduled segment i(t) only (O_S).",
        citation=f"{_PAPER}, Eq. 4 and 6, Algorithm 1",
        module=f"{_SEGMENTED}.SegmentedCrossAttention",
        state=f"{_SEGMENTED}.SegmentState",
        lean_state=f"{_SEGMENTED}.LeanSegmentState",
        reference_path=f"{_NAIVE}.segmented_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=True, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=False,
        ),
        step_cost="O(s·d)",
        build_cost="O(k·d) (segment-major copy of keys/values)",
        state_size="2·k·d (keys and values, segment-major)",
        table1_row="Segmented",
    ),
    Mechanism(
        name="srformer",
        doc="Segmented attention plus RAF recurrent attention over the other segments: O = O_S + O_R.",
        citation=f"{_PAPER}, Eq. 6, 10, 11 and 13-16, Algorithm 1, Appendix A.2 (RAF), Table 3 (ablations)",
        module="srformer.attention.srformer.SRformerCrossAttention",
        state="srformer.attention.srformer.SRformerState",
        lean_state="srformer.attention.srformer.LeanSRformerState",
        reference_path=f"{_NAIVE}.srformer_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=True, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=True, global_term=True,
            attention_weights=WEIGHTS_OF_SEGMENT,
        ),
        step_cost="O(s·d + d²)",
        build_cost="O(k·d² + m·d²) (all K_j^T V_j, the RAF recurrence over m segments)",
        state_size="2·k·d + m·d² (keys, values, one d×d RAF readout per segment)",
        ablations={
            "recurrent_only": "(I) O = O_R, no segmented attention",
            "no_norm": "(II) O_R is not divided by norm(K)",
            "no_raf": "(III) P_i is used directly, without the RAF neuron and its weights",
            "segment_products": "(IV) the RAF reads W K_i^T V_i instead of W P_i",
        },
        named_settings={
            "ablation-I": {"ablation": "recurrent_only"},
            "ablation-II": {"ablation": "no_norm"},
            "ablation-III": {"ablation": "no_raf"},
            "ablation-IV": {"ablation": "segment_products"},
            # Eq. 10 with sigma initialised to 0.5, Eq. 9's weighting when both softmax divisors are equal
            "srformer-sigma": {"mix_init": 0.5},
            # Beyond the paper (docs/design.md, "Surrogate gradient", "Two-sided neuron"): the paper's neuron with
            # a surrogate derivative, so that a neuron that does not fire still passes gradient to W, leak and
            # threshold; and the two-sided neuron (fires on either sign, keeps it) with the same surrogate.
            "srformer-surrogate": {"raf_surrogate_slope": 2.0},
            "srformer-two-sided": {"raf_neuron": "two_sided", "raf_surrogate_slope": 2.0},
        },
        table1_row="SRformer",
    ),
    Mechanism(
        name="xl",
        doc="Transformer-XL-style memory: softmax over segment i(t) and the stop-gradient segment i(t) - 1.",
        citation=f"Dai et al. 2019, Transformer-XL; {_PAPER}, Sec. 4.2 and Figure 4 (baseline)",
        module="srformer.attention.xl.XLCrossAttention",
        state=f"{_SEGMENTED}.SegmentState",
        lean_state=None,
        reference_path=f"{_NAIVE}.xl_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=False,
        ),
        step_cost="O(2s·d)",
        build_cost="O(k·d) (segment-major copy of keys/values)",
        state_size="2·k·d (keys and values, segment-major)",
    ),
    Mechanism(
        name="longt5",
        doc="LongT5-style transient global tokens: softmax over segment i(t) plus one mean token per segment.",
        citation=f"Guo et al. 2022, LongT5; {_PAPER}, Sec. 4.2 and Figure 4 (baseline)",
        module="srformer.attention.longt5.LongT5CrossAttention",
        state="srformer.attention.longt5.LongT5State",
        lean_state=None,
        reference_path=f"{_NAIVE}.longt5_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
        ),
        step_cost="O((s + m)·d)",
        build_cost="O(k·d) (segment-major copy, segment means)",
        state_size="2·k·d + 2·m·d (keys, values, global keys and values)",
    ),
    Mechanism(
        name="linear",
        doc="Linear attention with the elu+1 feature map over every encoder position (no segments, no RAF).",
        citation=f"Katharopoulos et al. 2020, Transformers are RNNs; {_PAPER}, Appendix A.1, Eq. 20 (baseline)",
        module="srformer.attention.linear.LinearCrossAttention",
        state="srformer.attention.linear.LinearState",
        lean_state="srformer.attention.linear.LinearState",
        reference_path=f"{_NAIVE}.linear_attention",
        capabilities=Capabilities(
            segment_free=True, lean_layout=True, state_grows_with_input=False, training_time_saving=True,
            has_softmax_part=False, recurrent_term=False, global_term=True,
        ),
        step_cost="O(d²)",
        build_cost="O(k·d²)",
        state_size="d² + d (phi(K)^T V and sum_j phi(K_j))",
    ),
    Mechanism(
        name="window",
        doc="Longformer/LED-style sliding window: softmax over the w positions centred on segment i(t)'s centre.",
        citation="Beltagy, Peters & Cohan 2020, Longformer: The Long-Document Transformer, Sec. 3.1 (sliding window)",
        module="srformer.attention.window.WindowCrossAttention",
        state=f"{_SEGMENTED}.SegmentState",
        lean_state=None,
        settings="srformer.attention.window.WindowSettings",
        reference_path=f"{_NAIVE}.window_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=False,
        ),
        step_cost="O((w + 2s)·d)",
        build_cost="O(k·d) (segment-major copy of keys/values)",
        state_size="2·k·d (keys and values, segment-major)",
    ),
    Mechanism(
        name="strided",
        doc="Sparse Transformer strided pattern: softmax over segment i(t) plus every l-th position (p mod l = l-1).",
        citation="Child, Gray, Radford & Sutskever 2019, Generating Long Sequences with Sparse Transformers, "
        "Sec. 4.2-4.3 (strided and fixed patterns)",
        module="srformer.attention.strided.StridedCrossAttention",
        state="srformer.attention.strided.StridedState",
        lean_state=None,
        settings="srformer.attention.strided.StridedSettings",
        reference_path=f"{_NAIVE}.strided_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
        ),
        step_cost="O((s + k/l)·d)",
        build_cost="O(k·d) (segment-major copy, the k/l strided keys/values)",
        state_size="2·k·d + 2·(k/l)·d (keys, values, strided keys and values)",
    ),
    Mechanism(
        name="star",
        doc="Star-Transformer relay: softmax over segment i(t) plus one relay token, the mean of all keys/values.",
        citation="Guo, Qiu, Liu, Shao, Xue & Zhang 2019, Star-Transformer, Sec. 3 (relay node)",
        module="srformer.attention.star.StarCrossAttention",
        state="srformer.attention.star.StarState",
        lean_state=None,
        reference_path=f"{_NAIVE}.star_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
        ),
        step_cost="O((s + 1)·d)",
        build_cost="O(k·d) (segment-major copy, the relay mean)",
        state_size="2·k·d + 2·d (keys, values, relay key and value)",
    ),
    Mechanism(
        name="fastformer",
        doc="Fastformer additive attention: O = Q_t * K_g * V_g with K_g, V_g summarised by additive attention.",
        citation="Wu, Wu, Qi, Huang & Xie 2021, Fastformer: Additive Attention Can Be All You Need, Sec. 3, "
        "Eq. 3-6 (adapted to cross attention: the decoder query is the global query)",
        module="srformer.attention.fastformer.FastformerCrossAttention",
        state="srformer.attention.fastformer.FastformerState",
        lean_state="srformer.attention.fastformer.FastformerState",
        reference_path=f"{_NAIVE}.fastformer_attention",
        capabilities=Capabilities(
            segment_free=True, lean_layout=True, state_grows_with_input=False, training_time_saving=True,
            has_softmax_part=False, recurrent_term=False, global_term=True,
            attention_weights=WEIGHTS_POOLED,
        ),
        step_cost="O(d)",
        build_cost="O(k·d) (additive weights, global key and value)",
        state_size="2·d (global key and value)",
    ),
    Mechanism(
        name="reformer",
        doc="Reformer LSH attention: softmax over the query's angular-LSH bucket inside two chunks of the "
        "bucket-sorted keys (w = chunk_size), rounds combined by their log-normalisers.",
        citation="Kitaev, Kaiser & Levskaya 2020, Reformer: The Efficient Transformer, Sec. 2 (angular LSH "
        "h(x) = argmax([xR; -xR]), sorting and chunking, multi-round LSH attention; queries and keys hashed with "
        "the same rotations)",
        module="srformer.attention.reformer.ReformerCrossAttention",
        state="srformer.attention.reformer.LSHState",
        lean_state=None,
        settings="srformer.attention.reformer.ReformerSettings",
        reference_path=f"{_NAIVE}.reformer_attention",
        capabilities=Capabilities(
            segment_free=True, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=False,
        ),
        step_cost="O(R·(d·b + log k + w·d)) (hash the query, find its bucket, softmax over R·min(2w, k) keys)",
        build_cost="O(R·k·(d·b + log k)) (hash every key and sort the keys in every round)",
        state_size="2·k·d + 2·R·k (keys, values, sorted buckets and key order per round)",
    ),
    Mechanism(
        name="routing",
        doc="Routing Transformer: softmax over the w keys of the query's nearest centroid (balanced clusters: "
        "each centroid's w nearest real keys, w = ceil(n/c) by default; EMA centroids).",
        citation="Roy, Saffar, Vaswani & Grangier 2021, Efficient Content-Based Sparse Attention with Routing "
        "Transformers, Sec. 4 (unit-norm queries and keys routed to the nearest of c centroids, balanced "
        "top-w clusters, mini-batch k-means by exponential moving average)",
        module="srformer.attention.routing.RoutingCrossAttention",
        state="srformer.attention.routing.RoutingState",
        lean_state=None,
        settings="srformer.attention.routing.RoutingSettings",
        reference_path=f"{_NAIVE}.routing_attention",
        capabilities=Capabilities(
            segment_free=True, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=False,
        ),
        step_cost="O(c·d + w·d) (route the query, softmax over its cluster's w keys; w = cluster_size, default "
        "ceil(k/c))",
        build_cost="O(c·k·(d + log k)) (every key's distance to every centroid, one sort per centroid)",
        state_size="2·k·d + c·w (keys, values, the key positions of every cluster)",
    ),
    Mechanism(
        name="bigbird",
        doc="BigBird-ITC pattern: softmax over segment i(t), the first g positions and r seeded random segments.",
        citation="Zaheer et al. 2020, Big Bird: Transformers for Longer Sequences, Sec. 2 (window, global and "
        "random attention; BigBird-ITC), the scheduled segment as the window",
        module="srformer.attention.bigbird.BigBirdCrossAttention",
        state="srformer.attention.bigbird.BigBirdState",
        lean_state=None,
        settings="srformer.attention.bigbird.BigBirdSettings",
        reference_path=f"{_NAIVE}.bigbird_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
        ),
        step_cost="O((s + g + r·s)·d)",
        build_cost="O(k·d + m²) (segment-major copy, the g global keys/values, the m×m random-block priorities)",
        state_size="2·k·d + 2·g·d + m·r (keys, values, global keys and values, random-block table)",
    ),
    Mechanism(
        name="compressive",
        doc="Compressive Transformer: softmax over segment i(t), the stop-gradient memory i(t) - 1 and the "
        "older segments mean-pooled with rate c.",
        citation="Rae, Potapenko, Jayakumar, Hillier & Lillicrap 2020, Compressive Transformers for Long-Range "
        "Sequence Modelling, Sec. 3 (memory and compressed memory; mean-pooling compression)",
        module="srformer.attention.compressive.CompressiveCrossAttention",
        state="srformer.attention.compressive.CompressiveState",
        lean_state=None,
        settings="srformer.attention.compressive.CompressiveSettings",
        reference_path=f"{_NAIVE}.compressive_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
        ),
        step_cost="O((2s + k/c)·d)",
        build_cost="O(k·d) (segment-major copy, the compressed rows)",
        state_size="2·k·d + 2·m·ceil(s/c)·d (keys, values, compressed keys and values)",
    ),
    Mechanism(
        name="adaptive",
        doc="Adaptive attention span: softmax around segment i(t) weighted by a learned soft mask m_z(x) per head.",
        citation="Sukhbaatar, Grave, Bojanowski & Joulin 2019, Adaptive Attention Span in Transformers, Sec. 3 "
        "(soft mask m_z(x) = min(max((R + z - x) / R, 0), 1), x measured from the scheduled segment)",
        module="srformer.attention.adaptive.AdaptiveSpanCrossAttention",
        state=f"{_SEGMENTED}.SegmentState",
        lean_state=None,
        settings="srformer.attention.adaptive.AdaptiveSettings",
        reference_path=f"{_NAIVE}.adaptive_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=False,
        ),
        step_cost="O((3s + 2S)·d)",
        build_cost="O(k·d) (segment-major copy of keys/values)",
        state_size="2·k·d (keys and values, segment-major)",
    ),
    Mechanism(
        name="bp",
        doc="BP-Transformer partition: softmax over segment i(t) token by token plus span nodes (segment means) "
        "of a binary tree over the segments, k per level and side, coarser further away.",
        citation="Ye, Guo, Gan, Qiu & Zhang 2019, BP-Transformer: Modelling Long-Range Context via Binary "
        "Partitioning, Sec. 3 (binary partition tree, k contexts per level), segments as the leaves",
        module="srformer.attention.bp.BPCrossAttention",
        state="srformer.attention.bp.BPState",
        lean_state=None,
        settings="srformer.attention.bp.BPSettings",
        reference_path=f"{_NAIVE}.bp_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
        ),
        step_cost="O((s + 2m)·d)",
        build_cost="O(k·d + m·d) (segment-major copy, the 2m - 1 span-node means)",
        state_size="2·k·d + 4·m·d (keys, values, span-node keys and values)",
    ),
    Mechanism(
        name="linformer",
        doc="Linformer: softmax over r rows E K, F V projected along the sequence by learned E, F (r x N).",
        citation="Wang, Li, Khabsa, Fang & Ma 2020, Linformer: Self-Attention with Linear Complexity, Sec. 4, Eq. 7 "
        "(headwise sharing; the first n columns of E, F for n real positions)",
        module="srformer.attention.linformer.LinformerCrossAttention",
        state=_SUMMARY_STATE,
        lean_state=_SUMMARY_STATE,
        settings="srformer.attention.linformer.LinformerSettings",
        reference_path=f"{_NAIVE}.linformer_attention",
        capabilities=Capabilities(
            segment_free=True, lean_layout=True, state_grows_with_input=False, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
        ),
        step_cost="O(r·d)",
        build_cost="O(r·k·d) (E K and F V)",
        state_size="2·r·d (projected keys and values)",
    ),
    Mechanism(
        name="performer",
        doc="Performer FAVOR+: phi(Q)(phi(K)^T V) / (phi(Q) . sum phi(K)), m positive orthogonal random features.",
        citation="Choromanski et al. 2021, Rethinking Attention with Performers, Sec. 2.2-2.4 (FAVOR+, positive "
        "orthogonal random features for the softmax kernel; non-causal)",
        module="srformer.attention.performer.PerformerCrossAttention",
        state="srformer.attention.performer.PerformerState",
        lean_state="srformer.attention.performer.PerformerState",
        settings="srformer.attention.performer.PerformerSettings",
        reference_path=f"{_NAIVE}.performer_attention",
        capabilities=Capabilities(
            segment_free=True, lean_layout=True, state_grows_with_input=False, training_time_saving=True,
            has_softmax_part=False, recurrent_term=False, global_term=True,
        ),
        step_cost="O(m·d)",
        build_cost="O(k·m·d) (phi(K)^T V and sum phi(K))",
        state_size="m·d + m + 1 (phi(K)^T V, sum phi(K), the keys' stabiliser)",
    ),
    Mechanism(
        name="compressed",
        doc="Memory-compressed attention: softmax over ceil(k/c) rows of a strided convolution (kernel = stride = c).",
        citation="Liu, Saleh, Pot, Goodrich, Sepassi, Kaiser & Shazeer 2018, Generating Wikipedia by Summarizing "
        "Long Sequences, Sec. 4.2.3 (memory-compressed attention)",
        module="srformer.attention.compressed.CompressedCrossAttention",
        state="srformer.attention.compressed.CompressedState",
        lean_state=None,
        settings="srformer.attention.compressed.CompressedSettings",
        reference_path=f"{_NAIVE}.compressed_attention",
        capabilities=Capabilities(
            segment_free=True, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
            attention_weights=WEIGHTS_POOLED,
        ),
        step_cost="O((k/c)·d)",
        build_cost="O(k·d²) (the two convolutions)",
        state_size="2·(k/c)·d (compressed keys and values)",
    ),
    Mechanism(
        name="inducing",
        doc="Set Transformer inducing points: softmax over I rows P K, P V pooled by I learned queries (P = softmax).",
        citation="Lee, Lee, Kim, Kosiorek, Choi & Teh 2019, Set Transformer, Sec. 3.2 (ISAB, PMA: learned queries "
        "attend the set; the decoder attends their summary)",
        module="srformer.attention.inducing.InducingCrossAttention",
        state=_SUMMARY_STATE,
        lean_state=_SUMMARY_STATE,
        settings="srformer.attention.inducing.InducingSettings",
        reference_path=f"{_NAIVE}.inducing_attention",
        capabilities=Capabilities(
            segment_free=True, lean_layout=True, state_grows_with_input=False, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
        ),
        step_cost="O(I·d)",
        build_cost="O(I·k·d) (P, P K and P V)",
        state_size="2·I·d (pooled keys and values)",
    ),
    Mechanism(
        name="block-topk",
        doc="Softmax over segment i(t) and the r other segments (or blocks of block_size) with the largest "
        "q·mean(K_j), per query and head.",
        citation="Lu et al. 2025, MoBA: Mixture of Block Attention for Long-Context LLMs (gate by q·mean-pooled "
        "block keys, top-k blocks); Yuan et al. 2025, Native Sparse Attention (its selection branch: top-n blocks)",
        module="srformer.attention.block_topk.BlockTopkCrossAttention",
        state="srformer.attention.block_topk.BlockTopkState",
        lean_state=None,
        settings="srformer.attention.block_topk.BlockTopkSettings",
        reference_path=f"{_NAIVE}.block_topk_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
            selects_keys=True,
        ),
        step_cost="O(m·d + m·log r + (r + 1)·s·d); with blocks of b: O((k/b)·d + (k/b)·log r + (s + r·b)·d)",
        build_cost="O(k·d) (segment-major copy of keys/values, the blocks' mean keys)",
        state_size="2·k·d + (k/b)·d (keys and values, segment-major; the mean keys, b = s by default)",
        named_settings={"block-topk-b4": {"block_size": 4, "top_segments": 16}},
    ),
    Mechanism(
        name="srformer-gated",
        doc="Softmax over segment i(t) plus linear attention over the other segments, under one shared normaliser.",
        citation="beyond the paper: the SRformer structure (Long, Chowdhury & Roy) with the memory read as linear "
        "attention under a normaliser shared with the softmax; Katharopoulos et al. 2020 (elu+1); the hybrid "
        "normalisers of Infini-attention (Munkhdalai et al. 2024) and Based (Arora et al. 2024)",
        module="srformer.attention.srformer_gated.GatedCrossAttention",
        state="srformer.attention.srformer_gated.GatedState",
        lean_state=None,
        settings="srformer.attention.srformer_gated.GatedSettings",
        reference_path=f"{_NAIVE}.gated_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
            attention_weights=WEIGHTS_OF_SEGMENT,
        ),
        step_cost="O(s·d + D·d)",
        build_cost="O(k·D·d + m·D·d) (phi(K_j)^T V_j per segment, prefix and suffix sums over the m segments)",
        state_size="2·k·d + m·D·(d + 1) (keys, values, S - S_j and z - z_j per segment; D = d for elu, "
        "1 + D' + D'² for taylor)",
        # D' = 4: a projection onto part of the head (at the default D' >= d the Taylor kernel of small scores is
        # within rounding-like distance of the softmax itself)
        named_settings={"srformer-gated-taylor": {"feature_map": "taylor", "feature_dim": 4}},
    ),
    Mechanism(
        name="quest",
        doc="Softmax over segment i(t) and the r leaves of b positions (per query and head) with the largest Quest "
        "bound sum_c max(q_c·min_c K, q_c·max_c K), optionally chosen within the p best groups of g leaves; "
        "long inputs read the chosen rows of the encoder output (rows_min_keys).",
        citation="Tang, Zhao, Zhu, Xiao, Kasikci & Han 2024, Quest: Query-Aware Sparsity for Efficient Long-Context "
        "LLM Inference, Sec. 3 (per-page min/max keys bound q·k; top-k pages); beyond it: the scheduled segment "
        "read exactly and a second level of blocks (NSA, Yuan et al. 2025; InfLLM, Xiao et al. 2024)",
        module="srformer.attention.quest.QuestCrossAttention",
        state="srformer.attention.quest.QuestState",
        lean_state=None,
        settings="srformer.attention.quest.QuestSettings",
        reference_path=f"{_NAIVE}.quest_attention",
        capabilities=Capabilities(
            segment_free=False, lean_layout=False, state_grows_with_input=True, training_time_saving=True,
            has_softmax_part=True, recurrent_term=False, global_term=True,
            selects_keys=True,
        ),
        step_cost="O((k/b)·d + (s + r·b)·d); with groups of g leaves: O((k/(g·b))·d + p·g·d + (s + r·b)·d); "
        "reading encoder rows: O((s + r·b)·D + D·d)",
        build_cost="O(k·d) (keys/values compacted, the leaves' and groups' min/max keys); reading encoder rows: the "
        "keys projected once, chunk by chunk, for the bounds",
        state_size="2·k·d + 2·(k/b)·d (keys and values, the leaves' bounds); reading encoder rows: 2·(k/b)·d",
        # beyond Quest, chosen on the recall probe straight after conversion: leaves of 2 keys bound tightly, and
        # groups of 16 similar leaves keep a step from scoring every leaf (quest-tree); quest-b2 scores every leaf,
        # as an accelerator step does anyway, with no tree to build
        named_settings={"quest-tree": {"leaf_size": 2, "top_leaves": 64, "group_size": 16, "top_groups": 64},
                        "quest-b2": {"leaf_size": 2, "top_leaves": 64}},
    ),
    Mechanism(
        name="knn",
        doc="Unlimiformer top-k attention: each query and head takes the softmax over the K = top_keys real keys "
        "with the largest Q·K (exact search; ties to the earlier position; all keys when K >= n). With knn_index, "
        "generation from long inputs searches one faiss index of the encoder output instead (flat or ivf), or its rows "
        "in torch (rows: no keys or values kept), or those rows through low-rank keys first (loki: Loki's scores in "
        "each head's principal basis pick index_candidates rows, scored exactly).",
        citation="Bertsch, Alon, Neubig & Gormley 2023, Unlimiformer: Long-Range Transformers with Unlimited Length "
        "Input, Sec. 2 (every cross-attention head attends its top-k keys over all the input; Sec. 2.3: one "
        "nearest-neighbour index of the encoder's hidden states, queried with W_k^T q)",
        module="srformer.attention.knn.KNNCrossAttention",
        state="srformer.attention.knn.KNNState",
        lean_state=None,
        settings="srformer.attention.knn.KNNSettings",
        reference_path=f"{_NAIVE}.knn_attention",
        capabilities=Capabilities(
            segment_free=True, lean_layout=False, state_grows_with_input=True, training_time_saving=False,
            has_softmax_part=True, recurrent_term=False, global_term=False,
            selects_keys=True,
        ),
        step_cost="O(k·d + k·log K + K·d) (score every key, select the top K = top_keys, softmax over them); with "
        "knn_index: the index search plus O(K·D·d) to project the K retrieved rows (rows: O(k·D) per head)",
        build_cost="none (keys/values projected once); with knn_index: one faiss index per input, for all layers",
        state_size="2·k·d (keys and values); with knn_index: none per layer (one index of k·D numbers per input; "
        "rows: the encoder output itself)",
        # knn-rows: the encoder output's rows searched in torch at every length (no keys or values kept), chosen for
        # long inputs on the state it saves and its recall, the exact search's
        # knn-loki: the rows read through a low-rank first stage (Loki), chosen for long inputs on the bytes a step
        # reads (a few percent of full attention's) and its recall, the exact search's
        # knn-loki-pages: knn-loki whose first stage reads the 256 pages of 16 keys of best bound (Quest's bounds in
        # Loki's basis), chosen on the bytes a step reads at 65k-262k tokens (under 1/10 of knn-loki's there)
        # knn-loki-pages-c64: knn-loki-pages scoring the keys of its pages on all 24 kept channels and taking 64
        # candidates instead of 256, chosen on the CPU time of a step (the candidates' rows it copies) and on finding
        # the same exact top 32 keys (SumPubMed text at 8k and 32k tokens: the same share as with 256 candidates)
        # knn-loki-tail: knn-loki-pages whose keys not read enter the softmax through 1,024 clusters of the encoder
        # positions shared by a layer's heads (each head's mean key), chosen on teacher-forced fidelity to full
        # attention (SumPubMed, 40 papers at 8,192 tokens, exact top 32: 90.2% argmax agreement without clusters,
        # 96.5% with 256 per head) and on the layer output's error (1,024 shared: 0.059, 256 per head: 0.089)
        named_settings={"knn-4": {"top_keys": 4}, "knn-rows": {"knn_index": "rows", "index_min_keys": 1},
                        "knn-loki": {"knn_index": "loki", "index_min_keys": 1},
                        "knn-loki-pages": {"knn_index": "loki", "index_min_keys": 1, "index_page": 16,
                                           "index_pages": 256},
                        "knn-loki-pages-c64": {"knn_index": "loki", "index_min_keys": 1, "index_page": 16,
                                               "index_pages": 256, "index_candidates": 64, "index_key_rank": 24},
                        "knn-loki-tail": {"knn_index": "loki", "index_min_keys": 1, "index_page": 16,
                                          "index_pages": 256, "tail_clusters": 1024}},
    ),
)
