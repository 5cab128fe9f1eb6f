"""mptune's bundled data: icon, stylesheet and export templates (read via tuner.resources)."""
