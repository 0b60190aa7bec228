"""A user's spelling of a paper id, brought to the readers' form."""
import pytest

from sciencemap.ids import norm_doi, paper_id_of


@pytest.mark.parametrize("text,expected", [
    ("doi:10.7554/eLife.06197", "doi:10.7554/elife.06197"),          # the DOI as the article prints it
    ("10.7554/elife.06197", "doi:10.7554/elife.06197"),              # bare
    ("https://doi.org/10.7554/ELIFE.06197", "doi:10.7554/elife.06197"),
    ("  DOI: 10.1000/xyz123. ", "doi:10.1000/xyz123"),
    ("25855408", "pmid:25855408"), ("PMID:25855408", "pmid:25855408"), ("pmid: 0025855408", "pmid:25855408"),
    ("PMC4399415", "pmc:4399415"), ("pmc:PMC4399415", "pmc:4399415"), ("pmc:4399415", "pmc:4399415"),
    ("arXiv:2104.06921v2", "arxiv:2104.06921"), ("https://arxiv.org/abs/hep-ph/0511200", "arxiv:hep-ph/0511200"),
    ("2104.06921", "arxiv:2104.06921"),
    ("ACL:P14-1011", "acl:p14-1011"), ("REF:00AB12CD34EF5678", "ref:00ab12cd34ef5678"),
    ("s2orc:1234567X", "s2orc:1234567X"),                            # another scheme: its id as given
    ("something else", "something else"),
])
def test_user_ids_take_the_readers_form(text, expected):
    assert paper_id_of(text) == expected


def test_a_doi_id_is_the_readers_doi_key():
    """The look-up's form of a DOI is the one the readers build ids from (jats, s2orc: doi:<norm_doi>)."""
    for raw in ("10.7554/eLife.06197", "https://dx.doi.org/10.1371/journal.PONE.0001);"):
        assert paper_id_of(raw) == f"doi:{norm_doi(raw)}"
