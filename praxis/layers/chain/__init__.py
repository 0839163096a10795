"""praxis.layers.chain: Chain and the helpers that build chains of layer configs.

For example, an MLP of five feed-forward layers (three of them copies of one config)::

  mlp = chain.chain(
    chain.feed_forward(2, 8, Config(activations.Swish)),
    chain.copy_n_times(3, chain.feed_forward(8, 8, Config(activations.Swish))),
    chain.feed_forward(8, 3),
  )
"""

from praxis.layers.chain.chain import Chain
from praxis.layers.chain.chain import call_chain
from praxis.layers.chain.chain_extensions import add_residual
from praxis.layers.chain.chain_extensions import apply_padding
from praxis.layers.chain.chain_extensions import chain
from praxis.layers.chain.chain_extensions import copy_n_times
from praxis.layers.chain.chain_extensions import dict_to_args
from praxis.layers.chain.chain_extensions import feed_forward
from praxis.layers.chain.chain_extensions import full_like
from praxis.layers.chain.chain_extensions import kwargs_with_name
from praxis.layers.chain.chain_extensions import log_args
from praxis.layers.chain.chain_extensions import repeat
