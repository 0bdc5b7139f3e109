"""Model families beyond SigLIP 2 B/16, one module each; registry.py registers each in one line."""
