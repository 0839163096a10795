"""`t5.data`: SeqIO's vocabularies, Feature and registries under t5's names (see t5/__init__.py).

`TaskRegistry.add(name, task_cls=seqio.Task, **task_kwargs)` is t5's older call shape (SeqIO's
own `add` takes the source second), which Pax's c4.py uses.
"""

from typing import Any

from hostenv import quiet_tensorflow

quiet_tensorflow.import_tensorflow()
import seqio  # After TensorFlow's quiet import: seqio imports TensorFlow too.

from t5.data import preprocessors  # noqa: F401

Feature = seqio.Feature
SentencePieceVocabulary = seqio.SentencePieceVocabulary
PassThroughVocabulary = seqio.PassThroughVocabulary
ByteVocabulary = seqio.ByteVocabulary
MixtureRegistry = seqio.MixtureRegistry
Task = seqio.Task
Mixture = seqio.Mixture
get_mixture_or_task = seqio.get_mixture_or_task


class TaskRegistry(seqio.TaskRegistry):
  """SeqIO's task registry with t5's `add(name, task_cls, **kwargs)`."""

  @classmethod
  def add(cls, name: str, task_cls: type = seqio.Task, **kwargs: Any) -> seqio.Task:
    task = task_cls(name, **kwargs)
    super().add_provider(name, task)
    return task
