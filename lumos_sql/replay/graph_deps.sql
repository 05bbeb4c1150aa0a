-- reads: deps
-- writes: none
-- The edges of `deps` the replay arrays are built from, in (rank, dst, src) order.
SELECT rank, src, dst, kind FROM deps ORDER BY rank, dst, src;
