"""MeSH facts shared by ingest (a paper's subject fields) and evaluation (MeSH accuracy).

Check tags are descriptors NLM indexers add to nearly every record they apply to (species, sex,
pregnancy, age groups): they say whom a paper studied, not what it is about, so neither the fields
nor the accuracy count them.
"""
from __future__ import annotations

CHECK_TAGS = frozenset({
    "Humans", "Animals", "Male", "Female", "Pregnancy",
    "Infant, Newborn", "Infant", "Child, Preschool", "Child", "Adolescent", "Young Adult",
    "Adult", "Middle Aged", "Aged", "Aged, 80 and over",
})
CHECK_TAG_UIS = frozenset({
    "D006801", "D000818", "D008297", "D005260", "D011247", "D007231", "D007223", "D002675",
    "D002648", "D000293", "D055815", "D000328", "D008875", "D000368", "D000369",
})
