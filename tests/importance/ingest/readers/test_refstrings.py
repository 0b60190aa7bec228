"""Raw reference strings (importance.ingest.readers.refstrings): the split per citation style, ids, and the
year rule. The strings are copied from the unArXive sample (arXiv_src_2212_086.jsonl,
bib_entries[*].bib_entry_raw; CC BY-SA 4.0, tests/data/NOTICE.md) unless marked synthetic."""
from datetime import date

import pytest

from importance.ingest.readers.refstrings import (clean_raw, find_arxiv, find_ids, max_year, parse_reference,
                                                  plausible_year)

# (raw string, title, year, family name of the first author or None, doi, arxiv id)
CASES = [
    # ML / CS: "Authors. Title. Venue, vol(num):pages, year."
    ("T. Alazard, O. Lazar, and Q. H. Nguyen. On the dynamics of the roots of polynomials under differentiation. "
     "Journal de Mathématiques Pures et Appliquées, 162:1–22, 2022.",
     "On the dynamics of the roots of polynomials under differentiation", 2022, "Alazard", None, None),
    ("R. Meka, O. Nguyen, and V. Vu. Anti-concentration for polynomials of independent random variables. "
     "Theory Comput., 12:Paper No. 11, 16, 2016.",
     "Anti-concentration for polynomials of independent random variables", 2016, "Meka", None, None),
    ("Z. Kabluchko. Repeated differentiation and free unitary Poisson process. arXiv preprint arXiv:2112.14729, 2021.",
     "Repeated differentiation and free unitary Poisson process", 2021, "Kabluchko", None, "2112.14729"),
    ("Alex M Lamb, Anirudh Goyal ALIAS PARTH GOYAL, Ying Zhang, Saizheng Zhang, Aaron C Courville, and Yoshua "
     "Bengio. Professor forcing: A new algorithm for training recurrent networks. Advances in neural information "
     "processing systems, 29, 2016.",
     "Professor forcing: A new algorithm for training recurrent networks", 2016, "Lamb", None, None),
    ("Ivan Gonzalez. Nucl. Phys. Proc. Suppl., 205-206:141–146, 2010.", None, 2010, "Gonzalez", None, None),
    # ACL / NeurIPS / AAAI author-year: "Authors. 2018. Title. In Proceedings ..."
    ("Ting Chen, Simon Kornblith, Mohammad Norouzi, and Geoffrey Hinton. 2020. A simple framework for contrastive "
     "learning of visual representations. In ICML.",
     "A simple framework for contrastive learning of visual representations", 2020, "Chen", None, None),
    ("Baltrušaitis, T.; Ahuja, C.; and Morency, L.-P. 2018. Multimodal machine learning: A survey and taxonomy. "
     "IEEE transactions on pattern analysis and machine intelligence 41(2): 423–443.",
     "Multimodal machine learning: A survey and taxonomy", 2018, "Baltrušaitis", None, None),
    # physics / APS: no title
    ("J. P. Perdew, K. Burke, and M. Ernzerhof, Phys. Rev. Lett. 77, 3865 (1996).", None, 1996, "Perdew", None, None),
    ("O. Kwon, V. Coropceanu, N. E. Gruhn, J. C. Durivage, J. G. Laquindanum, H. E. Katz, J. Cornil, and J. L. "
     "Brédas, The Journal of Chemical Physics 120, 8186 (2004).", None, 2004, "Kwon", None, None),
    ("D. Y. Chen, Y. B. Dong and X. Liu, Eur. Phys. J. C 70 (2010), 177-182 doi:10.1140/epjc/s10052-010-1449-5 "
     "[arXiv:1005.0066 [hep-ph]].", None, 2010, "Chen", "10.1140/epjc/s10052-010-1449-5", "1005.0066"),
    ("M. Czakon, Comput. Phys. Commun. 175 (2006), 559-571 doi:10.1016/j.cpc.2006.07.002 "
     "[arXiv:hep-ph/0511200 [hep-ph]].", None, 2006, "Czakon", "10.1016/j.cpc.2006.07.002", "hep-ph/0511200"),
    # physics with a title, without quotes (REVTeX, JHEP) and with quotes (AIP)
    ("A. Kandala, K. Temme, A. D. Córcoles, A. Mezzacapo, J. M. Chow, and J. M. Gambetta, Error mitigation "
     "extends the computational reach of a noisy quantum processor, Nature 567, 491 (2019).",
     "Error mitigation extends the computational reach of a noisy quantum processor", 2019, "Kandala", None, None),
    ("E. Farhi, J. Goldstone, and S. Gutmann, A quantum approximate optimization algorithm (2014).",
     "A quantum approximate optimization algorithm", 2014, "Farhi", None, None),
    ("M. Sjödahl, ColorMath - A package for color summed calculations in SU(Nc), Eur. Phys. J. C 73 (2013) 2310 "
     "[1211.2099].", "ColorMath - A package for color summed calculations in SU(Nc)", 2013, "Sjödahl", None, "1211.2099"),
    ("B. Cabouat and J. R. Gaunt, Combining single and double parton scatterings in a parton shower, JHEP 10 (2020) "
     "012 [2008.01442].", "Combining single and double parton scatterings in a parton shower", 2020, "Cabouat", None,
     "2008.01442"),
    ("G. Stock and M. Thoss, “Classical description of nonadiabatic quantum dynamics,” Adv. Chem. Phys. 131, "
     "243–376 (2005).", "Classical description of nonadiabatic quantum dynamics", 2005, "Stock", None, None),
    ("B. M. Terhal and D. P. DiVincenzo, Adaptive quantum computation, constant depth quantum circuits and "
     "arthur-merlin games 10.48550/ARXIV.QUANT-PH/0205133 (2002).",
     "Adaptive quantum computation, constant depth quantum circuits and arthur-merlin games", 2002, "Terhal",
     "10.48550/arxiv.quant-ph/0205133", "quant-ph/0205133"),
    # IEEE with LaTeX residue
    ("K.~Koide, M.~Yokozuka, S.~Oishi, and A.~Banno, ``Voxelized GICP for Fast and Accurate 3D Point Cloud "
     "Registration,'' in 2021 IEEE International Conference on Robotics and Automation (ICRA), 2021, pp. "
     "11 054--11 059.", "Voxelized GICP for Fast and Accurate 3D Point Cloud Registration", 2021, "Koide", None, None),
    ("J.~Clark and D.~A. Holton, A first look at graph theory. 5em minus 0.4emWorld Scientific, 1991.",
     "A first look at graph theory", 1991, "Clark", None, None),
    # astronomy / AAS and MNRAS: no title for articles, one for books
    ("Habbal, S. R., Druckmüller, M., Alzate, N., et al. 2021, , 911, L4, doi: 10.3847/2041-8213/abe775",
     None, 2021, "Habbal", "10.3847/2041-8213/abe775", None),
    ("Birkby, J. L. 2018, arXiv e-prints, arXiv:1806.04617. https://arxiv.org/abs/1806.04617",
     None, 2018, "Birkby", None, "1806.04617"),
    ("Aguilera D. N., Cirigliano V., Pons J. A., Reddy S., Sharma R., 2009, Phys. Rev. Lett., 102, 091101",
     None, 2009, "Aguilera", None, None),
    ("Chandrasekhar S., 1992, Liquid crystals. Cambridge University Press", "Liquid crystals", 1992, "Chandrasekhar",
     None, None),
    # APA / Springer LNCS / Vancouver
    ("Ethier, S. N. and Lee, J. (2010). A Markovian slot machine and Parrondo's paradox. The Annals of Applied "
     "Probability, 20(3), 1098-1125.", "A Markovian slot machine and Parrondo's paradox", 2010, "Ethier", None, None),
    ("P. Auer, N. Cesa-Bianchi, and P. Fischer. (2002). Finite-time analysis of the multi-armed bandit problem, "
     "Machine Learning, 47, 235-256.", "Finite-time analysis of the multi-armed bandit problem", 2002, "Auer", None,
     None),
    ("Hennessy, J.L., Patterson, D.A.: Computer Architecture: a Quantitative Approach. Elsevier, London (2011)",
     "Computer Architecture: a Quantitative Approach", 2011, "Hennessy", None, None),
    ("Bayles AV, Squires TM, Helgeson ME. Dark-field differential dynamic microscopy. Soft Matter. "
     "2016;12(8):2440-52.", "Dark-field differential dynamic microscopy", 2016, "Bayles", None, None),
    # AMS / math: "A. Author, Title, Journal 12 (2001), 1–10." and "Author, A. Title. Journal 45 (1997), 667–688."
    ("K. Behrend, The product formula for Gromov-Witten invariants, J. Algebraic Geom. 8 (1999), no. 3, 529–541. "
     "MR 1689355", "The product formula for Gromov-Witten invariants", 1999, "Behrend", None, None),
    ("M. Kontsevich and Yu. Manin, Gromov-Witten classes, quantum cohomology, and enumerative geometry, Comm. Math. "
     "Phys. 164 (1994), no. 3, 525–562. MR 1291244",
     "Gromov-Witten classes, quantum cohomology, and enumerative geometry", 1994, "Kontsevich", None, None),
    (", Diophantine geometry over groups. II. Completions, closures and formal solutions, Israel J. Math. 134 (2003), "
     "173–254. MR 1972179", "Diophantine geometry over groups. II. Completions, closures and formal solutions", 2003,
     None, None, None),
    ("Hackl, K. Generalized standard media and variational principles in classical and finite strain "
     "elastoplasticity. J. Mech. Phys. Solids 45 (1997), 667–688.",
     "Generalized standard media and variational principles in classical and finite strain elastoplasticity", 1997,
     "Hackl", None, None),
    ("W. Fulton and R. Pandharipande, Notes on stable maps and quantum cohomology, Algebraic geometry—Santa Cruz 1995, "
     "Proc. Sympos. Pure Math., vol. 62, Amer. Math. Soc., Providence, RI, 1997, pp. 45–96. MR 1492534",
     "Notes on stable maps and quantum cohomology", 1997, "Fulton", None, None),
    # books: "Title (Publisher, City, 1966)"
    ("D. Bohm, Quantum Theory (Prentice Hall, New York, 1966) section 12.6", "Quantum Theory", 1966, "Bohm", None,
     None),
    ("R. P. Feynman and A. R. Hibbs, Quantam mechanics and path integrals, Dover Books on Physics (Dover "
     "Publications, Mineola, NY, 2010).", "Quantam mechanics and path integrals", 2010, "Feynman", None, None),
    # not a reference at all (a footnote in the bibliography)
    ("We did not show the MRE for Tully's model I and the two pyrazine models, because it always remained very small "
     "throughout the dynamics, never exceeding a value of 0.035.", None, None, None, None, None),
]


@pytest.mark.parametrize("raw,title,year,first,doi,arxiv", CASES, ids=[c[0][:40] for c in CASES])
def test_split_per_style(raw, title, year, first, doi, arxiv):
    p = parse_reference(raw, 2022)
    assert (p.title, p.year, p.doi, p.arxiv) == (title, year, doi, arxiv)
    assert (p.authors[0]["family"] if p.authors else None) == first


def test_title_is_never_the_raw_string_and_holds_no_residue():
    for raw, *_ in CASES:
        t = parse_reference(raw, 2022).title
        assert t != clean_raw(raw)
        assert t is None or not any(x in t for x in ("{{", "~", "``", "em minus", "doi", "arXiv", "http"))


def test_years_never_from_doi_arxiv_id_or_page():
    # DOI prefixes (2041-8213), arXiv ids (1211.2099, 2205.00933), page numbers (2089, 1721)
    assert parse_reference("Kite, E. S., & Schaefer, L. 2021, , 909, L22, doi: 10.3847/2041-8213/abe7dc").year == 2021
    assert parse_reference("A. Author, Some work, Phys. Rev. D 1, 2 doi:10.3847/2041-8213/abe7dc", 2022).year is None
    assert parse_reference("P. Huembeli, G. Carleo, and A. Mezzacapo, Entanglement forging with generative neural "
                           "network models (2022), 2205.00933 .", 2022).year == 2022
    assert parse_reference("J. A. M. Vermaseren, New features of FORM, math-ph/0010025.", 2022).year is None
    assert parse_reference("Tomczyk, S., Landi, E., Berkey, B., et al. 2021, in AGU Fall Meeting Abstracts, Vol. "
                           "2021, 2089", 2022).year == 2021
    assert parse_reference("Yahalom, A. Fisher Information Perspective of Pauli’s Electron. Entropy 2022, 24, 1721. "
                           "https://doi.org/10.3390/e24121721", 2022).year == 2022
    # synthetic: no year anywhere but in ids and pages
    assert parse_reference("A. Author, Some work, J. Phys. 12, 1999-2003, arXiv:2011.12720, "
                           "doi:10.1016/2010.2020.01.001", 2022).year is None


def test_plausible_year_bound():
    raw = "J. Doe, A work in press, J. Phys. 12, 34 (2023)."  # synthetic
    assert parse_reference(raw, 2022).year == 2023          # citing year + 1: in press
    assert parse_reference(raw, 2021).year is None          # beyond citing year + 1
    assert parse_reference(raw.replace("2023", "1599"), 2022).year is None
    assert parse_reference(raw.replace("2023", "1600"), 2022).year == 1600
    nxt = date.today().year + 2
    assert parse_reference(raw.replace("2023", str(nxt))).year is None      # unknown citing year: now + 1
    assert max_year(None) == date.today().year + 1 and max_year(2019) == 2020
    assert plausible_year("2099", 2022) is None and plausible_year(1781, 2022) == 1781 and plausible_year(None) is None


def test_arxiv_ids_in_every_form():
    assert find_arxiv("[arXiv:1005.0066 [hep-ph]]") == "1005.0066"
    assert find_arxiv("JHEP 10 (2020) 012 [2008.01442].") == "2008.01442"
    assert find_arxiv("[arXiv:hep-ph/9204236 [hep-ph]]") == "hep-ph/9204236"
    assert find_arxiv("Adv. Math. 193 (2005) 56 [math.QA/0208146].") == "math/0208146"
    assert find_arxiv("arXiv:2212.06131v1 [math.FA]") == "2212.06131"
    assert find_arxiv("CoRR abs/1512.03385 (2015)") == "1512.03385"
    assert find_arxiv("arxiv.org/abs/2108.12488, 2021") == "2108.12488"
    # not arXiv ids: a month 13, an id of the wrong length for its year, a source-code library id
    assert find_arxiv("arXiv:4655353 [math.FA]") is None
    assert find_arxiv("Report 2213.04567") is None and find_arxiv("2101.1234") is None
    assert find_arxiv("ascl:1208.017") is None
    doi, arxiv, rest = find_ids("Zhang, 2020, 10.48550/arxiv.2011.12720")
    assert (doi, arxiv) == ("10.48550/arxiv.2011.12720", "2011.12720") and "10.48550" not in rest


def test_first_work_only_and_empty_input():
    p = parse_reference("H. Ooguri and C. Vafa, Nucl. Phys. B 361 (1991) 469; Nucl. Phys. B 367 (1991) 83.", 2022)
    assert (p.title, p.year, [a["family"] for a in p.authors]) == (None, 1991, ["Ooguri", "Vafa"])
    assert parse_reference("", 2022).title is None and parse_reference(None).year is None


def test_literal_guards_follow_re_ignorecase():
    """The parser skips a case-insensitive pattern when the lowercased text lacks its literal; re.I
    also matches "ı" (dotless i), "İ" and "ſ" (long s) to i and s, so the guard must fold them the
    same way (synthetic strings)."""
    plain = find_ids("A. Author, A title, arXiv:2104.06921, ISBN 978-3-16-148410-0, Available: somewhere.")
    assert plain == (None, "2104.06921", "A. Author, A title, somewhere.")
    for odd in ("A. Author, A title, arXıv:2104.06921, ıſbn 978-3-16-148410-0, Avaılable: somewhere.",
                "A. Author, A title, ARXİV:2104.06921, İSBN 978-3-16-148410-0, AVAİLABLE: somewhere."):
        assert find_ids(odd) == plain
