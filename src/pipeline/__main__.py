"""Entry point: ``python -m pipeline`` (placeholder until the Hydra pipeline lands)."""

if __name__ == "__main__":
    print("pipeline: the Hydra entry point is being built; see README.md")
