"""Packing through the model: a packed batch gives each token the loss of its document alone.

Documents are packed by `packing.Packer` ("pack": several per row, with segment_ids and
segment_pos) and, separately, padded one per row ("pad"). praxis' LanguageModel with
packed_input=True must give every token of the packed batch the same cross-entropy as in the
padded batch, and the same token-weighted avg_xent. A model that ignores segments
(packed_input=False: attention crosses documents) must not, which shows the test can fail.
"""

from absl.testing import absltest
import jax
import numpy as np

from paxml.data import packing
from praxis import pytypes
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers

_V = 50  # vocabulary
_T = 24  # row length
_BOS, _EOS = 2, 3


def _model(packed_input: bool) -> models.LanguageModel:
  stack = transformers.StackedTransformer.HParams(
    num_layers=2, hidden_dims=32, num_heads=2, dim_per_head=8
  )
  lm = transformer_models.TransformerLm.HParams(
    model_dims=16, vocab_size=_V, packed_input=packed_input, stacked_transformer_tpl=stack
  )
  return models.LanguageModel.HParams(lm_tpl=lm).Instantiate()


def _batch(rows) -> pytypes.NestedMap:
  return pytypes.NestedMap(packing.stack_rows(rows))


class PackedLossTest(absltest.TestCase):
  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    rng = np.random.default_rng(0)
    # 9 documents of 3..14 tokens (ids 4.. to avoid pad/bos/eos); with BOS and EOS each fits a row.
    cls.docs = [rng.integers(4, _V, size=rng.integers(3, 15)).astype(np.int32) for _ in range(9)]
    cls.packed = _batch(list(packing.pack_all(cls.docs, _T, "pack", _BOS, _EOS)))
    cls.alone = _batch(list(packing.pack_all(cls.docs, _T, "pad", _BOS, _EOS)))
    cls.model = _model(packed_input=True)
    cls.params = {"params": cls.model.init(jax.random.key(0), cls.packed)["params"]}

  def _xent(self, model, batch):
    """Per-token cross-entropy [B, T] and the metrics."""
    predictions = model.apply(self.params, batch, method="compute_predictions")
    metrics, _ = model.apply(self.params, batch)
    return np.asarray(predictions.per_example_xent).reshape(batch.ids.shape), metrics

  def _tokens_by_document(self, batch, xent):
    """{document index: per-token xent} read from a batch whose segments are the documents in
    order of their first token (how the packer places them is found by matching the ids)."""
    found = {}
    for b in range(batch.ids.shape[0]):
      for s in np.unique(batch.segment_ids[b][batch.segment_ids[b] > 0]):
        where = batch.segment_ids[b] == s
        ids = batch.ids[b][where]
        (d,) = [
          i
          for i, doc in enumerate(self.docs)
          if len(doc) + 1 == len(ids) and (ids[1:] == doc).all()
        ]
        found[d] = xent[b][where]
    return found

  def test_packing_actually_packs(self):
    self.assertLen(self.alone.ids, len(self.docs))
    self.assertLess(len(self.packed.ids), len(self.docs))
    self.assertGreater(self.packed.segment_ids.max(), 1)

  def test_packed_tokens_have_their_documents_loss(self):
    packed_xent, packed_metrics = self._xent(self.model, self.packed)
    alone_xent, alone_metrics = self._xent(self.model, self.alone)
    packed_docs = self._tokens_by_document(self.packed, packed_xent)
    alone_docs = self._tokens_by_document(self.alone, alone_xent)
    self.assertEqual(sorted(packed_docs), list(range(len(self.docs))))
    for d in range(len(self.docs)):
      np.testing.assert_allclose(
        packed_docs[d], alone_docs[d], rtol=1e-5, atol=1e-5, err_msg=f"document {d}"
      )
    # The token-weighted loss of the batch: the same, and equal to numpy's mean of the tokens.
    want = np.concatenate([alone_docs[d] for d in range(len(self.docs))]).mean()
    for metrics in (packed_metrics, alone_metrics):
      np.testing.assert_allclose(float(metrics["avg_xent"][0]), want, rtol=1e-5)
      self.assertEqual(float(metrics["num_predictions"][0]), sum(len(doc) + 1 for doc in self.docs))

  def test_ignoring_segments_changes_the_loss(self):
    # Same weights, attention across the packed documents: later documents see earlier ones.
    leaky_xent, _ = self._xent(_model(packed_input=False), self.packed)
    packed_xent, _ = self._xent(self.model, self.packed)
    real = self.packed.weights > 0
    later = real & (self.packed.segment_ids > 1)
    self.assertGreater(np.abs(leaky_xent - packed_xent)[later].max(), 1e-3)
    first = real & (self.packed.segment_ids == 1)  # the first document of a row sees only itself
    np.testing.assert_allclose(leaky_xent[first], packed_xent[first], rtol=1e-5, atol=1e-5)


if __name__ == "__main__":
  absltest.main()
