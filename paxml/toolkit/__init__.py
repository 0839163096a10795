"""A bobbin-compatible training toolkit: small tools for your own train loop.

Port bobbin code with `from paxml import toolkit as bobbin`: every name of
bobbin's package is here, flat, and bobbin's modules are submodules with
bobbin's names:

  cron:        CronTab, Trigger, ForEachNSteps, AtNthStep, AtFirstNSteps,
               ForEachTSeconds.
  training:    TrainState, StepInfo, BaseTrainTask, TrainTask,
               TrainingStepFnBuilder, initialize_train_state,
               PublishTrainingProgress.
  evaluation:  EvalResults, EvalTask, eval_batches, eval_datasets,
               SampledSet, RunEval, RunEvalKeepBest.
  tensorboard: PublishableSummary, ScalarSummary, ImageSummary,
               MplImageSummary, publish_train_intermediates,
               publish_trainer_env_info, NullSummaryWriter,
               ThreadedSummaryWriter, MultiDirectorySummaryWriter.
  pmap_util:   tpmap, unshard, gather_from_jax_processes,
               assert_replica_integrity.
  var_util:    nested_vars_to_paths, flatten_with_paths, dump_pytree_json,
               parse_pytree_json, read_pytree_json_file,
               write_pytree_json_file, summarize_shape, total_dimensionality.
  array_util:  split_leading_axis, flatten_leading_axes.
  pytypes:     Batch, BatchGen, Parameter, VarCollection.

bobbin's example library (ASR data tools and networks) is the subpackage
`paxml.toolkit.example_lib` (asrio, asrnn), imported on its own as in bobbin.

Checkpoint saves (paxml.checkpoints.TreeCheckpointer, the Pax trainer's store) are
asynchronous and always finished before the process exits (paxml.preemption).
Deliberate differences from bobbin: docs/toolkit.md.
"""

# pylint: disable=g-importing-member
from paxml.toolkit import array_util
from paxml.toolkit import cron
from paxml.toolkit import evaluation
from paxml.toolkit import pmap_util
from paxml.toolkit import pytypes
from paxml.toolkit import tensorboard
from paxml.toolkit import training
from paxml.toolkit import var_util
from paxml.toolkit.array_util import flatten_leading_axes
from paxml.toolkit.array_util import split_leading_axis
from paxml.preemption import wait_for_pending_saves
from paxml.toolkit.cron import CronTab
from paxml.toolkit.evaluation import eval_batches
from paxml.toolkit.evaluation import eval_datasets
from paxml.toolkit.evaluation import EvalResults
from paxml.toolkit.evaluation import EvalTask
from paxml.toolkit.evaluation import RunEval
from paxml.toolkit.evaluation import RunEvalKeepBest
from paxml.toolkit.evaluation import SampledSet
from paxml.toolkit.pmap_util import assert_replica_integrity
from paxml.toolkit.pmap_util import gather_from_jax_processes
from paxml.toolkit.pmap_util import tpmap
from paxml.toolkit.pmap_util import unshard
from paxml.toolkit.pytypes import Batch
from paxml.toolkit.pytypes import BatchGen
from paxml.toolkit.pytypes import Parameter
from paxml.toolkit.pytypes import VarCollection
from paxml.toolkit.tensorboard import ImageSummary
from paxml.toolkit.tensorboard import MplImageSummary
from paxml.toolkit.tensorboard import MultiDirectorySummaryWriter
from paxml.toolkit.tensorboard import NullSummaryWriter
from paxml.toolkit.tensorboard import publish_train_intermediates
from paxml.toolkit.tensorboard import publish_trainer_env_info
from paxml.toolkit.tensorboard import PublishableSummary
from paxml.toolkit.tensorboard import ScalarSummary
from paxml.toolkit.tensorboard import ThreadedSummaryWriter
from paxml.toolkit.training import BaseTrainTask
from paxml.toolkit.training import initialize_train_state
from paxml.toolkit.training import PublishTrainingProgress
from paxml.toolkit.training import StepInfo
from paxml.toolkit.training import TrainingStepFnBuilder
from paxml.toolkit.training import TrainState
from paxml.toolkit.training import TrainTask
from paxml.toolkit.var_util import dump_pytree_json
from paxml.toolkit.var_util import flatten_with_paths
from paxml.toolkit.var_util import nested_vars_to_paths
from paxml.toolkit.var_util import parse_pytree_json
from paxml.toolkit.var_util import read_pytree_json_file
from paxml.toolkit.var_util import summarize_shape
from paxml.toolkit.var_util import total_dimensionality
from paxml.toolkit.var_util import write_pytree_json_file
