"""Explanation-tree estimators; every one exposes ``tree_`` as an :class:`ExplanationTree`."""

from pipeline.trees.tree import Condition, ExplanationTree, Rule
from pipeline.trees.mmdt import MMDT, ConceptMMDT, RandomizedMMDT
from pipeline.trees.cart import CART, tree_from_sklearn
from pipeline.trees.spex import SpExClique, SpExGraph, SpExKNN
from pipeline.trees.imm import EMN, IMM, ExKMC

__all__ = ["ExplanationTree", "Rule", "Condition"]
__all__ += ["MMDT", "RandomizedMMDT", "ConceptMMDT", "CART", "tree_from_sklearn"]
__all__ += ["SpExClique", "SpExKNN", "SpExGraph", "IMM", "EMN", "ExKMC"]
from pipeline.trees.tao import TAO

__all__ += ["TAO"]
