"""What a COLMAP database (sqlite) holds, read between pycolmap's calls: features, matches, cameras."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Dict, Optional, Set

#: COLMAP's pair id packs two image ids: id1 * PAIR_BASE + id2.
PAIR_BASE = 2147483647


def _query(db: Path, sql: str, args: tuple = ()) -> Optional[list]:
    if not db.is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()
    except sqlite3.Error:  # the table is not made yet
        return None


def table_names(db: Path) -> Set[str]:
    """The tables in ``db`` (empty for a new or unreadable file)."""
    return {name for (name,) in _query(db, "SELECT name FROM sqlite_master WHERE type = 'table'") or []}


def image_ids(db: Path) -> Dict[str, int]:
    """Image name -> image id."""
    return {name: int(i) for i, name in _query(db, "SELECT image_id, name FROM images") or []}


def camera_of(db: Path, name: str) -> Optional[int]:
    """The camera id of image ``name``, None when it is not in the database."""
    rows = _query(db, "SELECT camera_id FROM images WHERE name = ?", (name,))
    return int(rows[0][0]) if rows else None


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
