"""Pax's `paxml.tasks.lm.input_generator`: the LM inputs Pax's experiment files name.

Pax's `SyntheticLmData` is a Lingvo input generator that Pax's lm_cloud experiments wrap in
`base_input.LingvoInputAdaptor`; here it is `paxml.data.synthetic.SyntheticLmData` (the same
constant batches: ids = labels = segment_ids = 1, paddings = 0, weights = 1, segment_pos =
0..seq_len-1), a BaseInput that the adaptor builds, or that a `datasets()` returns directly:

    input_p = input_generator.SyntheticLmData.HParams()
    input_p.batch_size = 8
    input_p.seq_len = 1024
    pax_fiddle.Config(base_input.LingvoInputAdaptor, input=input_p, is_training=True)

Pax's `TFRecordBertInput` and `TextInput` (Lingvo readers) are not provided: read text with
`paxml.data.text_pipeline.TextInput` or `paxml.seqio_input.SeqIOInput`.
"""

from paxml.data import synthetic

SyntheticLmData = synthetic.SyntheticLmData
