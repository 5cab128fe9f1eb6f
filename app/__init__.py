"""mptune's desktop application (PySide6 + pyqtgraph): the only package that imports Qt.

It reaches the engine (:mod:`tuner`) through one bridge (:mod:`app.bridge`) that turns engine
events into Qt signals on the GUI thread.
"""
