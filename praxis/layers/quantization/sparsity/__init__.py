"""Pax's sparsity for quantized layers: hparams, modes, pruning functions, SparsityBaseLayer."""
