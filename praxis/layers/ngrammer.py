"""N-grammer layers (Pax's `praxis.layers.ngrammer`): bi-gram embeddings mixed into the input.

N-grammer (Roy et al. 2022, https://arxiv.org/abs/2207.06366) augments each head's slice of a
token embedding with the embedding of a hashed bi-gram id:

  Ngrammer     bi-grams of the token ids themselves (unigram_vocab_size ids).
  VQNgrammer   bi-grams of per-head cluster ids: a VectorQuantization layer (online k-means)
               assigns each position's head slice to the nearest of K centroids, and those ids
               form the bi-grams. With `ngram_using_attention_scores` a position pairs with the
               one it attends to most instead of its predecessor.

Per head i, with ids x and pair ids p (the previous position, or PAD = 0 at a segment start):

  bigram  = x + p * vocab                                       (int64 where x64 is on)
  hashed  = ((bigram * (i + 1) + (i + 1)) mod prime_i) mod ngram_vocab_size
  ngram   = LayerNorm_i(table_i[hashed])                        [B, L, E]
  out_i   = concat(LayerNorm'_i(emb_i)[..., :H - E], ngram)     (concat_ngrams)
          | LayerNorm'_i(emb_i) + ngram                         (otherwise, E == H)

where prime_i is the i-th prime above ngram_vocab_size. Variable trees are Pax's:
`emb_layer_norm_i`, `ngram_layer_norm_i`, `ngram_table_i/emb_var` on Ngrammer; `vq_layer/means`
(non-trainable), optional `input_id_to_cluster_id_cache` and `count`, and `ngram_layer` on
VQNgrammer.

BregmanCompression, BregmanNgrammer (continuous bi-grams of BregmanPCA coefficients) and
NgrammerStub live in ngrammer_bregman and are importable from here, as in Pax.

Shape letters: B batch, L length, N heads, H dim per head, D = N * H, K clusters, E ngram dims.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import embedding_softmax
from praxis.layers import normalizations

WeightHParams = base_layer.WeightHParams
WeightInit = base_layer.WeightInit


def _wide_int():
  """int64 when jax_enable_x64 is on (Pax's intent: fewer hash collisions), else int32."""
  return jnp.int64 if jax.config.jax_enable_x64 else jnp.int32


def get_bigram_ids(
  ids: jax.Array,
  vocab_size: int,
  segment_pos: jax.Array | None = None,
  pair_ids: jax.Array | None = None,
) -> jax.Array:
  """Bi-gram ids `ids + partner * vocab_size` [B, L] from unigram ids [B, L].

  The partner of position t is position t - 1 (PAD = 0 at t = 0), or `ids[pair_ids[t]]` when
  `pair_ids` [B, L] is given (index L means PAD). With `segment_pos` [B, L] (packed inputs), a
  position starting a segment (segment_pos 0) pairs with PAD.
  """
  if vocab_size <= 0:
    raise ValueError(f"get_bigram_ids needs a positive vocab_size, got {vocab_size}.")
  ids = jnp.asarray(ids, _wide_int())  # [B, L]
  pad = jnp.zeros((ids.shape[0], 1), ids.dtype)
  padded = jnp.concatenate([ids, pad], axis=1)  # [B, L + 1]: index L is PAD
  if pair_ids is None:
    partner = jnp.concatenate([pad, ids[:, :-1]], axis=1)  # [B, L]
  else:
    if pair_ids.shape != ids.shape:
      raise ValueError(f"pair_ids {pair_ids.shape} must have the shape of ids {ids.shape}.")
    partner = jnp.take_along_axis(padded, pair_ids, axis=1)  # [B, L]
  if segment_pos is not None:
    partner = jnp.where(segment_pos == 0, jnp.zeros_like(partner), partner)
  return ids + partner * vocab_size


def _primes_above(n: int, count: int) -> list[int]:
  """The first `count` primes p with n < p (Pax takes them from sympy.primerange(n + 1, 2n))."""
  primes = []
  candidate = n + 1
  while len(primes) < count:
    if candidate >= 2 and all(candidate % d for d in range(2, int(candidate**0.5) + 1)):
      primes.append(candidate)
    candidate += 1
  return primes


class VectorQuantization(base_layer.BaseLayer):
  """Multi-head online k-means: each head slice's distances to its own K centroids.

  Centroids `means` [N, K, H] are non-trainable. Outside eval (JaxContext do_eval False) each
  call moves them towards the mean of the inputs assigned to them:
  `means <- decay * means + (1 - decay) * sum_x / (epsilon + count)` (needs `non_trainable`
  mutable to take effect).

  Attributes:
    num_clusters: K.
    num_heads: N.
    decay: centroid moving-average decay.
    epsilon: guards the division by the cluster count.
    dim_per_head: H.
    prenormalize: L2-normalise each input vector first (more even cluster use).
  """

  num_clusters: int = 0
  num_heads: int = 0
  decay: float = 0.999
  epsilon: float = 1e-6
  dim_per_head: int = 0
  prenormalize: bool = False

  def setup(self) -> None:
    if not self.num_clusters or not self.dim_per_head:
      raise ValueError(
        f"VectorQuantization needs num_clusters and dim_per_head, got {self.num_clusters} and "
        f"{self.dim_per_head}."
      )
    self.create_variable(
      "means",
      WeightHParams(
        shape=[self.num_heads, self.num_clusters, self.dim_per_head],
        collections=[base_layer.WeightHParamsCollection.REQUIRES_MEAN_SYNC],
        init=self.params_init,
      ),
      trainable=False,
    )

  def __call__(
    self,
    inputs: jax.Array,
    paddings: jax.Array | None = None,
    summarize_and_update: bool = True,
  ) -> tuple[jax.Array, jax.Array]:
    """Squared distances [B, L, N, K] of inputs ([B, L, N, H] or [B, L, D]) to the centroids,
    and the nearest centroids [B, L, N, H] (zero at padded positions)."""
    means = self.get_var("means")  # [N, K, H]
    x = self._cast_to_fprop_dtype(inputs)
    if x.ndim == 3:
      x = jnp.reshape(x, x.shape[:2] + (self.num_heads, self.dim_per_head))  # [B, L, N, H]
    if self.prenormalize:
      norms = jnp.linalg.norm(x, ord=2, axis=-1, keepdims=True)
      x = x / jnp.where(norms > 0, norms, 1.0)
    # |x - m|^2 = |x|^2 - 2 x.m + |m|^2
    dists = -2 * jnp.einsum("BLNH,NKH->BLNK", x, means)
    dists += jnp.sum(jnp.square(x), axis=-1, keepdims=True)  # [B, L, N, 1]
    dists += jnp.sum(jnp.square(means), axis=-1)[None, None]  # [1, 1, N, K]
    nearest = jnp.argmin(dists, axis=-1)  # [B, L, N]
    one_hot = jax.nn.one_hot(nearest, self.num_clusters, dtype=means.dtype)  # [B, L, N, K]
    if paddings is not None:
      one_hot *= 1 - paddings[:, :, None, None]
    nearest_centroid = jnp.einsum("BLNK,NKH->BLNH", one_hot, means)
    if summarize_and_update:
      self.add_summary(
        "k_means/centroid/cluster_ids",
        (nearest / self.num_clusters * 256)[..., None],
        summary_type=base_layer.SummaryType.IMAGE,
      )
      means_norm = jnp.linalg.norm(means, ord=2, axis=-1)  # [N, K]
      self.add_summary("k_means/centroid/l2_norm_avg", jnp.mean(means_norm))
      self.add_summary("k_means/centroid/l2_norm_min", jnp.min(means_norm))
      self.add_summary("k_means/centroid/l2_norm_max", jnp.max(means_norm))
    if not self.do_eval:
      count = jnp.sum(one_hot, axis=(0, 1))  # [N, K]
      if summarize_and_update:
        self._summarize_cluster_use(count)
      sum_x = jnp.einsum("BLNK,BLNH->NKH", one_hot, x)
      batch_means = sum_x / (self.epsilon + count[..., None])
      updated = (1.0 - self.decay) * batch_means + self.decay * means
      if summarize_and_update:
        self.update_var("means", updated.astype(means.dtype))
    return dists, nearest_centroid

  def _summarize_cluster_use(self, count: jax.Array) -> None:
    """Pax's per-head cluster-balance summaries from the counts [N, K]."""
    self.add_summary("k_means/centroid/avg_cluster_count", jnp.mean(count))
    for i in range(self.num_heads):
      head = count[i]
      total = jnp.sum(head)
      prefix = "k_means/centroid"
      self.add_summary(f"{prefix}/inactive_clusters_proportion/head{i}", jnp.mean(head == 0))
      self.add_summary(f"{prefix}/max_cluster_proportion/head{i}", jnp.max(head) / total)
      self.add_summary(f"{prefix}/min_cluster_proportion/head{i}", jnp.min(head) / total)
      used = head > 0
      log_share = jnp.log(jnp.where(used, head / total, 1.0)) / jnp.maximum(1.0, jnp.sum(used))
      self.add_summary(f"{prefix}/geomean_cluster_proportion/head{i}", jnp.exp(jnp.sum(log_share)))


class Ngrammer(base_layer.BaseLayer):
  """Adds hashed bi-gram embeddings of the token ids to each head's embedding slice.

  Attributes:
    ngram_vocab_size: buckets of each head's bi-gram table.
    unigram_vocab_size: vocabulary of the ids (bi-gram id = id + previous id * this).
    ngram_emb_dim: E, the bi-gram embedding size per head.
    concat_ngrams: replace the last E dims of each head slice (E <= H); else add (E == H).
    num_heads: N.
    dim_per_head: H.
  """

  ngram_vocab_size: int = 768 * 256
  unigram_vocab_size: int = 0
  ngram_emb_dim: int = 8
  concat_ngrams: bool = True
  num_heads: int = 0
  dim_per_head: int = 0

  def setup(self) -> None:
    _check_ngram_dims(self)
    emb_norms, ngram_norms, tables = [], [], []
    for _ in range(self.num_heads):
      emb_norms.append(pax_fiddle.Config(normalizations.LayerNorm, dim=self.dim_per_head))
      ngram_norms.append(pax_fiddle.Config(normalizations.LayerNorm, dim=self.ngram_emb_dim))
      table = self._ngram_table_tpl()
      table.weight_split_dims_mapping.wt = self.weight_split_dims_mapping.wt
      tables.append(table)
    self.create_children("emb_layer_norm", emb_norms)
    self.create_children("ngram_layer_norm", ngram_norms)
    self.create_children("ngram_table", tables)

  def _ngram_table_tpl(self) -> pax_fiddle.Config:
    """One head's bi-gram table (quantization.Ngrammer swaps in a quantized Embedding)."""
    return pax_fiddle.Config(
      embedding_softmax.Embedding,
      num_classes=self.ngram_vocab_size,
      input_dims=self.ngram_emb_dim,
      params_init=self.params_init,
    )

  def __call__(
    self,
    input_ids: jax.Array,
    input_embs: jax.Array,
    paddings: jax.Array | None = None,
    segment_pos: jax.Array | None = None,
    merge_heads: bool = True,
    pair_ids: jax.Array | None = None,
    emb_var: jax.Array | None = None,
    **kwargs,
  ) -> jax.Array:
    """Embeddings [B, L, D] or [B, L, N, H] with the bi-grams of `input_ids` mixed in.

    Args:
      input_ids: [B, L] (the same ids for every head) or [B, L, N] (per-head ids).
      input_embs: [B, L, D] or [B, L, N, H].
      paddings: [B, L], 1 at padded positions (their output is zeroed).
      segment_pos: [B, L] positions in packed segments (a segment's first token pairs with PAD).
      merge_heads: return [B, L, D] (else [B, L, N, H]).
      pair_ids: [B, N, L] explicit partner index per head (L = PAD).
      emb_var: unused (VQNgrammer's API).
      **kwargs: ignored (VQNgrammer's `check_time_step_zero` and others).
    """
    del emb_var, kwargs
    embs = self._cast_to_fprop_dtype(input_embs)
    batch, length = input_ids.shape[:2]
    if embs.ndim == 3:
      embs = jnp.reshape(embs, (batch, length, self.num_heads, -1))  # [B, L, N, H]
    primes = _primes_above(self.ngram_vocab_size, self.num_heads)
    ngram_embs, normed_embs = [], []
    for i in range(self.num_heads):
      ids = input_ids if input_ids.ndim == 2 else input_ids[:, :, i]  # [B, L]
      bigrams = get_bigram_ids(
        ids,
        self.unigram_vocab_size,
        segment_pos,
        pair_ids=None if pair_ids is None else pair_ids[:, i, :],
      )
      # A different affine hash per head, so heads collide on different bi-grams.
      hashed = ((bigrams * (i + 1) + (i + 1)) % primes[i]) % self.ngram_vocab_size
      ngram = self.ngram_table[i].emb_lookup(hashed)  # [B, L, E]
      ngram_embs.append(self.ngram_layer_norm[i](ngram))
      normed_embs.append(self.emb_layer_norm[i](embs[:, :, i, :]))  # [B, L, H]
    ngram_embs = jnp.stack(ngram_embs, axis=2)  # [B, L, N, E]
    embs = jnp.stack(normed_embs, axis=2)  # [B, L, N, H]
    if self.concat_ngrams:
      keep = self.dim_per_head - self.ngram_emb_dim
      embs = jnp.concatenate([embs[..., :keep], ngram_embs.astype(embs.dtype)], axis=-1)
    else:
      embs = embs + ngram_embs
    if paddings is not None:
      embs *= 1 - paddings[:, :, None, None]
    if merge_heads:
      embs = jnp.reshape(embs, (batch, length, -1))  # [B, L, D]
    return embs


def _check_ngram_dims(layer) -> None:
  if layer.concat_ngrams and layer.ngram_emb_dim > layer.dim_per_head:
    raise ValueError(
      f"{type(layer).__name__}(concat_ngrams=True) needs ngram_emb_dim <= dim_per_head, got "
      f"{layer.ngram_emb_dim} > {layer.dim_per_head}."
    )
  if not layer.concat_ngrams and layer.ngram_emb_dim != layer.dim_per_head:
    raise ValueError(
      f"{type(layer).__name__}(concat_ngrams=False) adds the n-gram embedding to each head, so "
      f"ngram_emb_dim ({layer.ngram_emb_dim}) must equal dim_per_head ({layer.dim_per_head})."
    )


class VQNgrammer(base_layer.BaseLayer):
  """Ngrammer over per-head cluster ids from a VectorQuantization layer.

  Attributes:
    ngram_vocab_size: buckets of each head's bi-gram table.
    unigram_vocab_size: vocabulary of the token ids; when set, a non-trainable
      `input_id_to_cluster_id_cache` [V, N] remembers each id's last cluster (training).
    ngram_emb_dim: E.
    ngram_using_attention_scores: pair each position with the one it attends to most (the
      attention probabilities are passed in) rather than its predecessor.
    causal_attention: with attention scores, a position pairs only with earlier ones.
    concat_ngrams: replace the last E dims of each head slice; else add (E == H).
    num_clusters: K.
    num_heads: N.
    decay, epsilon, prenormalize: the VectorQuantization's.
    dim_per_head: H.
    use_cached_input_ids_to_cluster_ids: (eval) take cluster ids from the cache by token id.
    enable_cache_updates: write the cache while training.
    full_update_cache_frequency, full_update_cache_steps: also recompute the whole cache from
      the embedding table `emb_var` every n steps / at these steps (training).
  """

  ngram_vocab_size: int = 768 * 256
  unigram_vocab_size: int = 0
  ngram_emb_dim: int = 8
  ngram_using_attention_scores: bool = False
  causal_attention: bool = True
  concat_ngrams: bool = False
  num_clusters: int = 0
  num_heads: int = 0
  decay: float = 0.999
  epsilon: float = 1e-6
  dim_per_head: int = 0
  use_cached_input_ids_to_cluster_ids: bool = False
  enable_cache_updates: bool = True
  full_update_cache_frequency: int = 0
  full_update_cache_steps: tuple[int, ...] = ()
  prenormalize: bool = False

  @classmethod
  def set_canonical_sharding_params(
    cls,
    vqngrammer_p,
    *,
    replica_axis,
    data_axis,
    mdl_axis,
    ici_mesh_shape,
    dcn_mesh_shape,
    mesh_axis_names,
    training_optimized,
  ):
    """Pax's: the bi-gram tables split [mdl, data] on the given mesh."""
    del replica_axis, training_optimized
    vqngrammer_p.ici_mesh_shape = ici_mesh_shape
    vqngrammer_p.dcn_mesh_shape = dcn_mesh_shape
    vqngrammer_p.mesh_axis_names = mesh_axis_names
    vqngrammer_p.weight_split_dims_mapping.wt = [mdl_axis, data_axis]
    return vqngrammer_p

  def _ngram_layer_tpl(self) -> pax_fiddle.Config:
    """Child `ngram_layer`'s config before sizing (quantization.VQNgrammer swaps in its own)."""
    return pax_fiddle.Config(Ngrammer)

  def setup(self) -> None:
    _check_ngram_dims(self)
    self.create_child(
      "vq_layer",
      pax_fiddle.Config(
        VectorQuantization,
        num_clusters=self.num_clusters,
        num_heads=self.num_heads,
        dim_per_head=self.dim_per_head,
        decay=self.decay,
        epsilon=self.epsilon,
        params_init=self.params_init,
        prenormalize=self.prenormalize,
      ),
    )
    if self.unigram_vocab_size:
      self.create_variable(
        "input_id_to_cluster_id_cache",
        WeightHParams(
          shape=[self.unigram_vocab_size, self.num_heads],
          dtype=jnp.int32,
          init=WeightInit.Constant(0),
        ),
        trainable=False,
      )
    ngram_layer = self._ngram_layer_tpl().set(
      ngram_vocab_size=self.ngram_vocab_size,
      unigram_vocab_size=self.num_clusters,  # the bi-grams are over cluster ids
      ngram_emb_dim=self.ngram_emb_dim,
      concat_ngrams=self.concat_ngrams,
      num_heads=self.num_heads,
      dim_per_head=self.dim_per_head,
      params_init=self.params_init,
    )
    ngram_layer.weight_split_dims_mapping.wt = self.weight_split_dims_mapping.wt
    self.create_child("ngram_layer", ngram_layer)
    if self._should_full_update_cache():
      self.create_variable(
        "count",
        WeightHParams(shape=[], init=WeightInit.Constant(0), dtype=jnp.int32),
        trainable=False,
      )

  def __call__(
    self,
    input_ids: jax.Array | None,
    input_embs: jax.Array,
    paddings: jax.Array | None = None,
    segment_pos: jax.Array | None = None,
    merge_heads: bool = True,
    attention_scores: jax.Array | None = None,
    emb_var: jax.Array | None = None,
    check_time_step_zero: bool = False,
  ) -> jax.Array:
    """Embeddings [B, L, D] or [B, L, N, H] with the cluster bi-grams mixed in.

    Args:
      input_ids: [B, L] or [B, L, N] token ids (the cache's keys; else unused).
      input_embs: [B, L, D] or [B, L, N, H].
      paddings: [B, L], 1 at padded positions.
      segment_pos: [B, L] positions in packed segments.
      merge_heads: return [B, L, D] (else [B, L, N, H]).
      attention_scores: [B, N, L, L] attention probabilities (ngram_using_attention_scores).
      emb_var: [V, D] embedding table, for full cache updates.
      check_time_step_zero: positions whose id is 0 and whose embedding is all zero (the
        decoder's empty prefix before step 0) get cluster 0, i.e. pair as PAD.
    """
    pair_ids = None
    if self.use_cached_input_ids_to_cluster_ids:
      if not self.do_eval or not self.unigram_vocab_size or input_ids is None:
        raise ValueError(
          "VQNgrammer(use_cached_input_ids_to_cluster_ids=True) reads cluster ids from the "
          "cache by token id: it needs eval mode (training would freeze the cache), "
          "unigram_vocab_size > 0 and input_ids."
        )
      cluster_ids = self.get_var("input_id_to_cluster_id_cache")[(input_ids,)]
    else:
      if self.ngram_using_attention_scores:
        pair_ids = self._pair_ids_from_scores(attention_scores)
      input_embs = self._cast_to_fprop_dtype(input_embs)
      distances, _ = self.vq_layer(input_embs, paddings=paddings)  # [B, L, N, K]
      cluster_ids = jnp.argmin(distances, axis=-1)  # [B, L, N]
      if check_time_step_zero:
        cluster_ids = _zero_empty_prefix(cluster_ids, input_ids, input_embs)
      self._maybe_update_cache(input_ids, cluster_ids, emb_var)
    return self.ngram_layer(
      cluster_ids, input_embs, paddings, segment_pos, merge_heads=merge_heads, pair_ids=pair_ids
    )

  def _pair_ids_from_scores(self, scores: jax.Array | None) -> jax.Array:
    """Partner index [B, N, L] per position: argmax of its attention row (earlier only when
    causal; the first position pairs with PAD = index L)."""
    if scores is None:
      raise ValueError(
        "VQNgrammer(ngram_using_attention_scores=True) needs attention_scores [B, N, L, L]."
      )
    if not self.causal_attention:
      return jnp.argmax(scores, axis=-1)
    length = scores.shape[2]
    earlier = jnp.arange(length)[None, :] < jnp.arange(length)[:, None]  # [L, L]
    masked = jnp.where(earlier, scores, -jnp.inf)
    pair = jnp.argmax(masked, axis=-1)  # [B, N, L]
    return jnp.where(jnp.arange(length) == 0, length, pair).astype(jnp.int32)

  def _maybe_update_cache(self, input_ids, cluster_ids, emb_var) -> None:
    """Training only: remember each id's cluster, and refresh the whole cache on schedule."""
    if (
      not self.do_eval
      and self.unigram_vocab_size
      and input_ids is not None
      and self.enable_cache_updates
    ):
      cache = self.get_var("input_id_to_cluster_id_cache")  # [V, N]
      flat_ids = jnp.reshape(input_ids, [-1])
      flat_clusters = jnp.reshape(cluster_ids, [-1, self.num_heads])
      for i in range(self.num_heads):
        cache = cache.at[flat_ids, i].set(flat_clusters[:, i])
      self.update_var("input_id_to_cluster_id_cache", cache)
    if self._should_full_update_cache():
      if emb_var is None:
        raise ValueError(
          "VQNgrammer with full_update_cache_frequency / full_update_cache_steps needs emb_var "
          "(the [V, D] embedding table)."
        )
      count = self.get_var("count")
      due = jnp.zeros([], bool)
      if self.full_update_cache_frequency:
        due |= count % self.full_update_cache_frequency == 0
      for step in self.full_update_cache_steps:
        due |= count == step
      cache = self.get_var("input_id_to_cluster_id_cache")
      cache = jax.lax.cond(due, self._full_update_cache, lambda _: cache, emb_var)
      self.update_var("input_id_to_cluster_id_cache", cache)
      self.update_var("count", count + 1)

  def _full_update_cache(self, emb_var: jax.Array) -> jax.Array:
    """The cluster of every vocabulary entry [V, N], in blocks of 8192 ids to bound memory."""
    if not self.unigram_vocab_size or emb_var.shape != (
      self.unigram_vocab_size,
      self.num_heads * self.dim_per_head,
    ):
      raise ValueError(
        f"VQNgrammer full cache update: emb_var {emb_var.shape} must be [unigram_vocab_size, "
        f"num_heads * dim_per_head] = [{self.unigram_vocab_size}, "
        f"{self.num_heads * self.dim_per_head}]."
      )
    cache = self.get_var("input_id_to_cluster_id_cache")
    block = 8192
    for start in range(0, self.unigram_vocab_size, block):
      stop = min(start + block, self.unigram_vocab_size)
      dists, _ = self.vq_layer(emb_var[start:stop][None], summarize_and_update=False)
      cache = cache.at[start:stop].set(jnp.argmin(dists[0], axis=-1))  # [l, N]
    return cache

  def _should_full_update_cache(self) -> bool:
    return not self.do_eval and bool(
      self.full_update_cache_frequency or self.full_update_cache_steps
    )

  def extend_step(
    self,
    input_embs: jax.Array,
    step: int | jax.Array,
    merge_heads: bool | None = True,
    attention_score: jax.Array | None = None,
  ) -> jax.Array:
    """The output at position `step` ([B, D] or [B, N, H]) of embeddings [B, L, ...] so far.

    `attention_score` [B, N, L] is the attention row of position `step`
    (ngram_using_attention_scores; causal only).
    """
    input_embs = self._cast_to_fprop_dtype(input_embs)
    pair_ids = None
    if self.ngram_using_attention_scores:
      if attention_score is None:
        raise ValueError(
          "VQNgrammer.extend_step with ngram_using_attention_scores needs attention_score "
          "[B, N, L]."
        )
      if not self.causal_attention:
        raise ValueError("VQNgrammer.extend_step needs causal_attention=True.")
      length = attention_score.shape[2]
      earlier = jnp.arange(length) < step  # [L]
      best = jnp.argmax(jnp.where(earlier, attention_score, -jnp.inf), axis=-1)  # [B, N]
      best = jnp.where(step > 0, best, length).astype(jnp.int32)
      pair_ids = jnp.broadcast_to(best[..., None], attention_score.shape)  # [B, N, L]
    distances, _ = self.vq_layer(input_embs)
    cluster_ids = jnp.argmin(distances, axis=-1)  # [B, L, N]
    out = self.ngram_layer(cluster_ids, input_embs, merge_heads=merge_heads, pair_ids=pair_ids)
    return jnp.squeeze(jax.lax.dynamic_slice_in_dim(out, step, 1, axis=1), axis=1)


def _zero_empty_prefix(
  cluster_ids: jax.Array, input_ids: jax.Array | None, input_embs: jax.Array
) -> jax.Array:
  """Cluster 0 where the id is 0 and the embedding all zero: the decoder's empty prefix slot
  before step 0, which must pair as PAD like the first position of a forward pass."""
  if input_ids is None:
    has_id = jnp.zeros(input_embs.shape[:2] + (1,), jnp.int32)  # [B, L, 1]
  elif input_ids.ndim == 3:
    has_id = jnp.max((input_ids != 0).astype(jnp.int32), axis=-1)[..., None]  # [B, L, 1]
  else:
    has_id = (input_ids != 0).astype(jnp.int32)[..., None]  # [B, L, 1]
  if input_embs.ndim == 4:
    has_emb = jnp.max((input_embs != 0).astype(jnp.int32), axis=-1)  # [B, L, N]
  else:
    has_emb = jnp.max((input_embs != 0).astype(jnp.int32), axis=-1)[..., None]  # [B, L, 1]
  return jnp.where(jnp.maximum(has_id, has_emb) == 0, 0, cluster_ids)


# Pax's other n-grammer layers, under Pax's import path (defined beside this module).
from praxis.layers.ngrammer_bregman import BregmanCompression  # noqa: E402, F401  pylint: disable=g-import-not-at-top,wrong-import-position
from praxis.layers.ngrammer_bregman import BregmanNgrammer  # noqa: E402, F401  pylint: disable=g-import-not-at-top,wrong-import-position
from praxis.layers.ngrammer_bregman import NgrammerStub  # noqa: E402, F401  pylint: disable=g-import-not-at-top,wrong-import-position
from praxis import py_utils
from praxis import pytypes

# Pax's module-level names for the types and variable collections this module's API uses.
JTensor = pytypes.JTensor
NestedMap = py_utils.NestedMap
