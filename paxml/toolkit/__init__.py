"""A bobbin-compatible training toolkit: small tools for your own train loop.

Port bobbin code with `from paxml import toolkit as bobbin`; every name below
is available flat on the package, as in bobbin.

training (training.py): TrainState, StepInfo, BaseTrainTask, TrainTask,
  TrainingStepFnBuilder, initialize_train_state, SaveCheckpoint, WriteLog,
  PublishTrainingProgress.
periodic actions (crontab.py): CronTab, Trigger, ForEachNSteps, AtNthStep,
  AtFirstNSteps, ForEachTSeconds (from paxml.triggers).
evaluation (evaluation.py): EvalResults, EvalTask, eval_batches,
  eval_datasets, SampledSet, RunEval, RunEvalKeepBest.
summaries (summary.py): PublishableSummary, ScalarSummary, ImageSummary,
  publish_train_intermediates, publish_trainer_env_info, NullSummaryWriter,
  ThreadedSummaryWriter, MultiDirectorySummaryWriter.
pmap helpers (pmap_utils.py): tpmap, replicate, unreplicate, unshard,
  gather_from_jax_processes, assert_replica_integrity.
variables (var_utils.py): nested_vars_to_paths, flatten_with_paths,
  dump_pytree_json, parse_pytree_json, read_pytree_json_file,
  write_pytree_json_file, summarize_shape, total_dimensionality,
  split_leading_axis, flatten_leading_axes.
"""

from paxml.toolkit.crontab import AtFirstNSteps
from paxml.toolkit.crontab import AtNthStep
from paxml.toolkit.crontab import CronTab
from paxml.toolkit.crontab import ForEachNSteps
from paxml.toolkit.crontab import ForEachTSeconds
from paxml.toolkit.crontab import Trigger
from paxml.toolkit.evaluation import eval_batches
from paxml.toolkit.evaluation import eval_datasets
from paxml.toolkit.evaluation import EvalResults
from paxml.toolkit.evaluation import EvalTask
from paxml.toolkit.evaluation import RunEval
from paxml.toolkit.evaluation import RunEvalKeepBest
from paxml.toolkit.evaluation import SampledSet
from paxml.toolkit.pmap_utils import assert_replica_integrity
from paxml.toolkit.pmap_utils import gather_from_jax_processes
from paxml.toolkit.pmap_utils import replicate
from paxml.toolkit.pmap_utils import tpmap
from paxml.toolkit.pmap_utils import unreplicate
from paxml.toolkit.pmap_utils import unshard
from paxml.toolkit.summary import ImageSummary
from paxml.toolkit.summary import MultiDirectorySummaryWriter
from paxml.toolkit.summary import NullSummaryWriter
from paxml.toolkit.summary import publish_trainer_env_info
from paxml.toolkit.summary import publish_train_intermediates
from paxml.toolkit.summary import PublishableSummary
from paxml.toolkit.summary import ScalarSummary
from paxml.toolkit.summary import ThreadedSummaryWriter
from paxml.toolkit.training import BaseTrainTask
from paxml.toolkit.training import initialize_train_state
from paxml.toolkit.training import PublishTrainingProgress
from paxml.toolkit.training import SaveCheckpoint
from paxml.toolkit.training import StepInfo
from paxml.toolkit.training import TrainingStepFnBuilder
from paxml.toolkit.training import TrainState
from paxml.toolkit.training import TrainTask
from paxml.toolkit.training import WriteLog
from paxml.toolkit.var_utils import dump_pytree_json
from paxml.toolkit.var_utils import flatten_leading_axes
from paxml.toolkit.var_utils import flatten_with_paths
from paxml.toolkit.var_utils import nested_vars_to_paths
from paxml.toolkit.var_utils import parse_pytree_json
from paxml.toolkit.var_utils import read_pytree_json_file
from paxml.toolkit.var_utils import split_leading_axis
from paxml.toolkit.var_utils import summarize_shape
from paxml.toolkit.var_utils import total_dimensionality
from paxml.toolkit.var_utils import write_pytree_json_file
