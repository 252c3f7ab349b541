"""Parallelism search: enumerate plans, rank them with a fast analytical estimate from the
same cost models, and confirm the best with the engine."""

from codesign.search.search import Candidate, SearchResult, search
from codesign.search.space import PlanPoint, SearchSpace, enumerate_plans

__all__ = ["Candidate", "PlanPoint", "SearchResult", "SearchSpace", "enumerate_plans", "search"]
