"""`InputDataError`: a data file an input cannot read, in a module without TensorFlow.

paxml/main.py turns it into a one-line usage error; defining it here lets main catch it without
importing text_pipeline (and with it TensorFlow) in runs that read no data files.
"""


class InputDataError(ValueError):
  """A data file is unreadable or holds a record of the wrong shape; the message names it."""
