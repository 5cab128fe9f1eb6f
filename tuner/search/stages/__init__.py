"""The stages of a search, each a unit of one idea, run in order by the conductor
(:class:`tuner.search.strategy.Search`) on a shared
:class:`~tuner.search.stages.context.SearchContext`.
"""
