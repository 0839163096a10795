"""The part of Google's `t5` package that Pax's experiment files use: `t5.data`.

Pax's `paxml/tasks/lm/params/c4.py` registers its C4 tasks with `t5.data.TaskRegistry`,
`t5.data.SentencePieceVocabulary` / `PassThroughVocabulary` / `Feature` and three
`t5.data.preprocessors` (rekey, reduce_concat_tokens, split_tokens_to_targets_length). The `t5`
wheel (0.9.4, 2023) pulls in mesh-tensorflow, torch, transformers and more, and its `t5.data`
imports them; so this package provides only those names, on SeqIO (which the real `t5.data`
re-exports too). Install the real `t5` ahead of this directory on the path to use it instead.
"""
