"""Read-only counts from a COLMAP database (sqlite), safe while pycolmap writes to it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Dict, Optional, Set

#: COLMAP's pair id packs two image ids: id1 * PAIR_BASE + id2.
PAIR_BASE = 2147483647


def _query(db: Path, sql: str) -> Optional[list]:
    if not db.is_file():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.2) as conn:
            return conn.execute(sql).fetchall()
    except sqlite3.Error:  # locked by the writer, or the table not made yet
        return None


def count(db: Path, table: str) -> Optional[int]:
    """Rows in ``table`` (``keypoints``, ``matches``, ``two_view_geometries``), None when unreadable."""
    rows = _query(db, f"SELECT COUNT(*) FROM {table}")
    return None if rows is None else int(rows[0][0])


def images_with_features(db: Path) -> Dict[str, int]:
    """Image name -> number of keypoints, for the images in the database."""
    rows = _query(db, "SELECT images.name, COALESCE(keypoints.rows, 0) FROM images "
                      "LEFT JOIN keypoints ON images.image_id = keypoints.image_id")
    return {} if rows is None else {name: int(n) for name, n in rows}


def matched_pairs(db: Path) -> Set[tuple[int, int]]:
    """The image-id pairs already matched (rows in ``matches``, empty ones included)."""
    rows = _query(db, "SELECT pair_id FROM matches") or []
    return {(int(p) // PAIR_BASE, int(p) % PAIR_BASE) for (p,) in rows}


def verified_images(db: Path, min_inliers: int) -> Set[str]:
    """Names of the images with at least one geometrically verified pair of ``min_inliers`` matches."""
    rows = _query(db, f"SELECT pair_id FROM two_view_geometries WHERE rows >= {int(min_inliers)}") or []
    ids: Set[int] = set()
    for (pair,) in rows:
        ids.update((int(pair) // PAIR_BASE, int(pair) % PAIR_BASE))
    names = _query(db, "SELECT image_id, name FROM images") or []
    return {name for image_id, name in names if image_id in ids}
