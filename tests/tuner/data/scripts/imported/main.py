"""An entry script that keeps its training in a module beside it (trainer.py), as projects
split theirs: this file calls no fit itself."""

import argparse

from trainer import train

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

history = train(epochs=args.epochs)
print("trained", len(history.history["loss"]), "epochs")
