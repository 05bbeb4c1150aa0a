-- reads: {{collectives_glob}}
-- writes: collectives
-- collectives: one row per collective kernel per rank, matched across ranks, with clock offsets
-- and the wait / transfer split (written by lumos.replay.collectives.build_collectives).
CREATE OR REPLACE VIEW collectives AS
SELECT *
FROM read_parquet({{collectives_glob}}, union_by_name = true, hive_partitioning = false);
