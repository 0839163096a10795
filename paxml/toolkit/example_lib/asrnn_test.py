"""Tests for asrnn: features, masking by paddings, bobbin's variable trees."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from paxml.toolkit.example_lib import asrio
from paxml.toolkit.example_lib import asrnn


def _right_paddings(lengths, max_length):
  return (np.arange(max_length)[np.newaxis, :] >= np.asarray(lengths)[:, np.newaxis]).astype(
    np.float32
  )


class LogMelFilterBankTest(absltest.TestCase):
  def test_a_tone_peaks_in_its_mel_band(self):
    sr, hz = 16000, 1000.0
    wave = (10000 * np.sin(2 * np.pi * hz * np.arange(4000) / sr))[np.newaxis]
    paddings = _right_paddings([2000], 4000)
    module = asrnn.LogMelFilterBank(num_bins=40)
    feats, feat_paddings = module.apply({}, wave, paddings)
    self.assertEqual(feats.shape, (1, (4000 - 401) // 160 + 1, 40))
    # A frame is padding only when all its 401 samples are: frames starting at >= 2000.
    starts = np.arange(feats.shape[1]) * 160
    np.testing.assert_array_equal(feat_paddings[0], (starts >= 2000).astype(np.float32))
    # The loudest band is the one whose center is nearest 1 kHz.
    mel = asrio.linear_to_mel_weight_matrix(40, 257, sr, 125.0, 7600.0)
    centers = (mel * np.linspace(0, sr / 2, 257)[:, None]).sum(0) / mel.sum(0)
    self.assertEqual(int(np.argmax(feats[0, 5])), int(np.argmin(abs(centers - hz))))

  def test_silence_is_the_log_floor(self):
    module = asrnn.LogMelFilterBank(num_bins=5)
    feats, _ = module.apply({}, np.zeros((2, 800)), np.zeros((2, 800)))
    np.testing.assert_allclose(feats, np.log(1e-5), rtol=1e-6)

  def test_mismatched_paddings_are_named(self):
    with self.assertRaisesRegex(ValueError, "Length.*LogMelFilterBank"):
      asrnn.LogMelFilterBank().apply({}, np.zeros((2, 800)), np.zeros((2, 700)))


class CnnEncoderTest(absltest.TestCase):
  def test_subsampling_and_padded_frames(self):
    x = np.random.RandomState(0).normal(size=(2, 9, 12))
    paddings = _right_paddings([9, 3], 9)
    module = asrnn.CnnEncoder(
      channels=(4, 5), num_outputs=6, use_batch_norm=True, batch_norm_axis_name=None
    )
    variables = module.init(jax.random.PRNGKey(0), x, paddings, is_eval=True)
    self.assertEqual(
      set(variables["params"]),
      {"Conv_0", "Conv_1", "PaddedBatchNorm_0", "PaddedBatchNorm_1", "Dense_0"},
    )
    self.assertEqual(variables["params"]["Dense_0"]["kernel"].shape, (3 * 5, 6))
    (y, y_paddings), _ = module.apply(
      variables, x, paddings, is_eval=False, mutable=["batch_stats"]
    )
    self.assertEqual(y.shape, (2, 3, 6))  # Time 9 -> 5 -> 3 with SAME stride 2.
    # A subsampled frame is padding when its whole window is: lengths 3 -> 2 -> 2.
    np.testing.assert_array_equal(y_paddings, [[0, 0, 0], [0, 0, 1]])
    np.testing.assert_allclose(y[1, 2], 0.0)  # Zeroed, and the output bias starts at 0.


class PaddedBatchNormTest(absltest.TestCase):
  def test_statistics_skip_padded_frames(self):
    rng = np.random.RandomState(1)
    x = rng.normal(size=(3, 6, 4)) * 2 + 5
    paddings = _right_paddings([6, 2, 4], 6)
    x[paddings > 0.5] = 1e6  # Must not leak into the statistics.
    module = asrnn.PaddedBatchNorm(use_running_average=False, momentum=0.9)
    variables = module.init(jax.random.PRNGKey(0), x, paddings)
    y, updated = module.apply(variables, x, paddings, mutable=["batch_stats"])
    valid = x[paddings < 0.5]
    np.testing.assert_allclose(updated["batch_stats"]["mean"], 0.1 * valid.mean(0), rtol=1e-4)
    np.testing.assert_allclose(updated["batch_stats"]["var"], 0.9 + 0.1 * valid.var(0), rtol=1e-4)
    np.testing.assert_allclose(
      y[paddings < 0.5], (valid - valid.mean(0)) / np.sqrt(valid.var(0) + 1e-5), atol=1e-4
    )
    np.testing.assert_allclose(y[paddings > 0.5], 0.0)

  def test_rank_four_input_counts_every_reduced_element(self):
    x = np.random.RandomState(2).normal(size=(2, 5, 3, 4)) + 3
    paddings = _right_paddings([5, 2], 5)
    module = asrnn.PaddedBatchNorm(use_running_average=False, momentum=0.0)
    variables = module.init(jax.random.PRNGKey(0), x, paddings)
    _, updated = module.apply(variables, x, paddings, mutable=["batch_stats"])
    valid = x[paddings < 0.5].reshape(-1, 4)
    np.testing.assert_allclose(updated["batch_stats"]["mean"], valid.mean(0), rtol=1e-5)


class ConformerTest(absltest.TestCase):
  def _block_and_vars(self, **kwargs):
    x = np.random.RandomState(3).normal(size=(2, 7, 8)).astype(np.float32)
    paddings = _right_paddings([7, 4], 7)
    block = asrnn.ConformerBlock(**kwargs)
    conv = asrnn.ConformerConvBlock
    # Outside pmap there is no "batch" axis to sum BatchNorm statistics over.
    with absltest.mock.patch.object(
      asrnn, "ConformerConvBlock", lambda **kw: conv(batch_norm_axis_name=None, **kw)
    ):
      variables = block.init(jax.random.PRNGKey(0), x, paddings, is_eval=True)
      outputs = block.apply(variables, x, paddings, is_eval=True)
    return block, variables, x, paddings, outputs

  def test_bobbins_variable_tree(self):
    _, variables, *_ = self._block_and_vars(num_heads=2)
    params = variables["params"]
    self.assertEqual(
      set(params),
      {
        "ConformerFfnBlock_0",
        "ConformerMhsaBlock_0",
        "ConformerConvBlock_0",
        "ConformerFfnBlock_1",
        "LayerNorm_0",
      },
    )
    mhsa = params["ConformerMhsaBlock_0"]
    self.assertEqual(set(mhsa), {"LayerNorm_0", "SelfAttention_0", "query_scale"})
    self.assertEqual(mhsa["query_scale"].shape, (4,))
    self.assertEqual(mhsa["SelfAttention_0"]["query"]["kernel"].shape, (8, 2, 4))
    self.assertEqual(params["ConformerFfnBlock_0"]["Dense_0"]["kernel"].shape, (8, 32))
    self.assertEqual(set(variables["batch_stats"]["ConformerConvBlock_0"]), {"PaddedBatchNorm_0"})

  def test_padded_frames_do_not_change_valid_outputs(self):
    block, variables, x, paddings, (y, y_paddings) = self._block_and_vars()
    np.testing.assert_array_equal(y_paddings, paddings)
    noisy = np.where(paddings[..., None] > 0.5, 100.0, x)
    conv = asrnn.ConformerConvBlock
    with absltest.mock.patch.object(
      asrnn, "ConformerConvBlock", lambda **kw: conv(batch_norm_axis_name=None, **kw)
    ):
      y2, _ = block.apply(variables, noisy, paddings, is_eval=True)
    np.testing.assert_allclose(y2[paddings < 0.5], y[paddings < 0.5], atol=1e-5)

  def test_zero_query_scale_is_plain_attention(self):
    x = np.random.RandomState(4).normal(size=(1, 5, 8)).astype(np.float32)
    paddings = np.zeros((1, 5), np.float32)
    scaled = asrnn.ConformerMhsaBlock(num_heads=2, deterministic=True)
    plain = asrnn.ConformerMhsaBlock(num_heads=2, deterministic=True, use_query_scaler=False)
    variables = scaled.init(jax.random.PRNGKey(0), x, paddings)
    plain_vars = {"params": {k: v for k, v in variables["params"].items() if k != "query_scale"}}
    np.testing.assert_allclose(
      scaled.apply(variables, x, paddings), plain.apply(plain_vars, x, paddings), atol=1e-5
    )


class SpecAugTest(absltest.TestCase):
  def test_masks_stay_inside_the_utterance(self):
    x = np.ones((4, 50, 20), np.float32)
    paddings = _right_paddings([50, 30, 20, 10], 50)
    module = asrnn.SpecAug(freq_mask_count=0, time_mask_count=2, time_mask_max_ratio=0.2)
    y = np.asarray(
      module.apply({}, x, paddings, deterministic=False, rngs={"specaug": jax.random.PRNGKey(0)})
    )
    for b, length in enumerate([50, 30, 20, 10]):
      masked = np.flatnonzero(y[b, :, 0] == 0.0)
      self.assertLessEqual(masked.size, 2 * (int(0.2 * length) + 1))
      self.assertTrue(np.all(masked < length))
    np.testing.assert_array_equal(module.apply({}, x, paddings, deterministic=True), x)


class OptimizerTest(absltest.TestCase):
  def test_without_clipping_it_is_adamw(self):
    params = {"w": jnp.arange(6.0).reshape(2, 3)}
    grads = {"w": jnp.array([[0.5, -1.0, 2.0], [0.1, 0.0, -3.0]])}
    ours = asrnn.adamw_with_clipping(
      0.1, block_update_rms_threshold=None, global_gradient_norm_threshold=None
    )
    reference = optax.adamw(0.1, weight_decay=1e-4)
    got, _ = ours.update(grads, ours.init(params), params)
    want, _ = reference.update(grads, reference.init(params), params)
    np.testing.assert_allclose(got["w"], want["w"], rtol=1e-6)

  def test_global_norm_clipping(self):
    tx = asrnn.adamw_with_clipping(
      -1.0,
      b1=0.0,
      b2=0.0,
      eps=0.0,
      weight_decay=0.0,
      block_update_rms_threshold=None,
      global_gradient_norm_threshold=1.0,
    )
    params = (jnp.zeros(4),)
    updates, _ = tx.update((jnp.full(4, 3.0),), tx.init(params), params)
    # Adam with b1 = b2 = 0 is the sign of the clipped gradient; lr -1 keeps it.
    np.testing.assert_allclose(updates[0], 1.0, rtol=1e-5)


if __name__ == "__main__":
  absltest.main()
