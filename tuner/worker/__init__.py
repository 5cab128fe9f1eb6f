"""The trial worker: the only part of mptune that imports TensorFlow and Keras.

It runs in its own process (:mod:`tuner.trials.runner` starts it), reads a trial spec from stdin
and reports on a dedicated pipe. Nothing here is imported by the CLI or the GUI.
"""
