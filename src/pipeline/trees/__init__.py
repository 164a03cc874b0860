"""Explanation-tree estimators; every one exposes ``tree_`` as an :class:`ExplanationTree`."""

from pipeline.trees.tree import Condition, ExplanationTree, Rule

__all__ = ["ExplanationTree", "Rule", "Condition"]
