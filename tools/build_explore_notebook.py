"""Writes notebooks/explore_run.ipynb (outputs empty; tests/test_pipeline_end_to_end.py executes it).

    python tools/build_explore_notebook.py

The notebook is kept as code here so that its cells are reviewed like code and rebuilt in one step."""
from pathlib import Path

import nbformat as nbf

CELLS = [
    ("md", """# A finished sciencemap run

Run `make demo` first; this notebook reads `runs/demo/` (or the run named by the environment variable
`SCIENCEMAP_RUN`). It shows the map and its overlays, the network statistics of the kNN graph beside the
direct-citation and a random graph (the seed paper's Table 6 and Fig. 7), the topics and research areas,
a look-up of the papers most similar to one paper (Tables 7–8), and the placement of new papers on the
finished map."""),
    ("code", """import json, os, shutil, subprocess, sys, tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from IPython.display import Image, Markdown, display

RUN = Path(os.environ.get('SCIENCEMAP_RUN', '../runs/demo')).resolve()
REPO = Path(os.environ.get('SCIENCEMAP_REPO', '..')).resolve()
papers = pq.read_table(RUN / 'papers', columns=['paper_id', 'title', 'year', 'source', 'source_file']).to_pandas()
print(RUN, f'{len(papers):,} papers, {papers.source_file.notna().sum():,} with a record of their own')"""),
    ("md", "## The map and its overlays\nBase map (by source), main field, interdisciplinarity (DIV) and mean year of each paper's topic."),
    ("code", """for name in ('map', 'map_field', 'map_interdisciplinarity', 'map_year'):
    display(Image(filename=str(RUN / f'{name}.png'), width=900))"""),
    ("md", "## Network statistics: kNN, direct citation, random (Table 6) and edge overlap (Fig. 7)"),
    ("code", """report = (RUN / 'report.md').read_text().splitlines()
start = next(i for i, l in enumerate(report) if l.startswith('## ') and 'etwork' in l)
end = next((i for i in range(start + 1, len(report)) if report[i].startswith('## ')), len(report))
display(Markdown('\\n'.join(report[start:end])))"""),
    ("md", "## Topics and research areas"),
    ("code", """topics = pq.read_table(RUN / 'topics').to_pandas()
areas = pq.read_table(RUN / 'areas').to_pandas()
display(topics.sort_values(['resolution', 'size'], ascending=[True, False]).groupby('resolution').head(5))
display(areas.sort_values('size', ascending=False).head(10))"""),
    ("md", "## The papers most similar to one paper (Tables 7–8)\nA corpus paper that cites other papers of the corpus; `cites` says whether it cites the neighbour."),
    ("code", """refs = pq.read_table(RUN / 'references', columns=['citing_id', 'cited_id']).to_pandas().dropna()
corpus = set(papers.paper_id[papers.source_file.notna()])
in_corpus = refs[refs.citing_id.isin(corpus) & refs.cited_id.isin(corpus)]
focal = in_corpus.citing_id.value_counts().index[0] if len(in_corpus) else refs.citing_id.value_counts().index[0]
out = subprocess.run([sys.executable, '-P', str(REPO / 'jobs' / 'lookup.py'), '--run', str(RUN),
                      '--paper-id', focal, '--k', '10'], capture_output=True, text=True, check=True).stdout
print(out)"""),
    ("md", """## Placing new papers without recomputing the map
Ten papers' vectors, slightly perturbed, stand in for newly embedded papers (a user embeds a new month with the
run's model into a run of its own). `place` finds their neighbours on the map, votes a topic and positions each
with the map's saved local layout; `--no-redraw` leaves the map PNGs as they are."""),
    ("code", """from sciencemap.vectors import open_vectors
from sciencemap.contracts import embeddings_schema

vec = open_vectors(RUN / 'vectors')
rows = np.random.default_rng(0).choice(vec.n, 10, replace=False)
X = np.asarray(vec.X[np.sort(rows)], np.float32)
X = X + 0.01 * np.random.default_rng(1).normal(size=X.shape).astype(np.float32)
new = Path(tempfile.mkdtemp()) / 'new'
(new / 'embeddings').mkdir(parents=True)
ids = [f'new:{i}' for i in range(len(X))]
pq.write_table(pa.table({'paper_id': ids, 'vector': pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), X.shape[1])},
                        schema=embeddings_schema(X.shape[1])), new / 'embeddings' / 'part-00000.parquet')
out = subprocess.run([sys.executable, '-P', str(REPO / 'jobs' / 'place.py'), '--run', str(RUN), '--new', str(new),
                      '--no-redraw'], capture_output=True, text=True, check=True).stdout
summary = json.loads(out[out.index('{'):])
print({k: summary[k] for k in ('new_papers', 'placed', 'unplaced', 'median_vote_share')})
placed = pq.read_table(RUN / 'placed').to_pandas()
t = topics[topics.resolution == summary['map_resolution']].set_index('cluster')['label']
placed.assign(topic=placed.cluster.map(t))"""),
]


def main() -> None:
    nb = nbf.v4.new_notebook()
    nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    out = Path(__file__).resolve().parent.parent / "notebooks" / "explore_run.ipynb"
    nbf.write(nb, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
