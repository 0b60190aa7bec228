"""Evaluation: what scores a map or an encoder against a criterion (MeSH accuracy, accuracy–granularity
curves, compared relatedness graphs, citation and text graphs, network statistics, benchmark readers)."""
