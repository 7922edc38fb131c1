"""The SQL of a .vis.db: the reference's three tables and seven indexes, byte for byte as msprobe 26.2.0 writes
them (so tb-graph-ascend opens tbprobe's files), and tbprobe's own tables, which the reference plugin ignores."""
from typing import Tuple

__all__ = [
    "TABLE_STATEMENTS",
    "INDEX_STATEMENTS",
    "TBPROBE_TABLE_STATEMENTS",
    "SCHEMA_TABLES_SQL",
    "SCHEMA_INDEXES_SQL",
    "TBPROBE_TABLES_SQL",
    "TBPROBE_SCHEMA_VERSION",
    "NODE_COLUMNS",
    "CONFIG_COLUMNS",
    "NODE_EXT_COLUMNS",
    "FINDING_COLUMNS",
    "EDGE_COLUMNS",
]

TBPROBE_SCHEMA_VERSION = 1

# One statement per string, without the trailing ';', exactly as sqlite_master stores them.
TABLE_STATEMENTS: Tuple[str, ...] = (
    """CREATE TABLE tb_nodes (
    id TEXT PRIMARY KEY,
    graph_id TEXT NOT NULL,
    node_order INTEGER NOT NULL,
    node_name TEXT NOT NULL,
    node_type TEXT NOT NULL,
    up_node TEXT,
    sub_nodes TEXT,
    precision_index INTEGER,
    overflow_level TEXT,
    micro_step_id INTEGER NOT NULL,
    matched_node_link TEXT,
    stack_id TEXT,
    parallel_merge_info TEXT,
    matched_distributed TEXT,
    modified INTEGER NOT NULL,
    input_data TEXT,
    output_data TEXT,
    data_source TEXT,
    dump_data_dir TEXT,
    step INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    is_distributed INTEGER
)""",
    """CREATE TABLE tb_stack (
    id TEXT PRIMARY KEY,
    stack_info TEXT
)""",
    """CREATE TABLE tb_config (
    id TEXT PRIMARY KEY,
    graph_type TEXT NOT NULL,
    task TEXT,
    tool_tip TEXT,
    micro_steps INTEGER,
    overflow_check INTEGER,
    node_colors TEXT NOT NULL,
    rank_list TEXT NOT NULL,
    step_list TEXT NOT NULL
)""",
)

INDEX_STATEMENTS: Tuple[str, ...] = (
    "CREATE INDEX index1 ON tb_nodes (step, rank, data_source, up_node, node_order)",
    "CREATE INDEX index2 ON tb_nodes (step, rank, data_source, node_name)",
    "CREATE INDEX index3 ON tb_nodes (step, rank, data_source, node_order)",
    "CREATE INDEX index4 ON tb_nodes (step, rank, node_order)",
    "CREATE INDEX index5 ON tb_nodes (step, rank, micro_step_id, node_order)",
    "CREATE INDEX index6 ON tb_nodes (step, rank, modified, matched_node_link)",
    "CREATE INDEX index7 ON tb_nodes (is_distributed)",
)

TBPROBE_TABLE_STATEMENTS: Tuple[str, ...] = (
    "CREATE TABLE tbprobe_meta (key TEXT PRIMARY KEY, value TEXT)",
    """CREATE TABLE tbprobe_node_ext (
    id TEXT PRIMARY KEY,
    exec_order INTEGER,
    subtree_precision REAL,
    subtree_overflow TEXT,
    worst_metric REAL,
    flags TEXT
)""",
    """CREATE TABLE tbprobe_findings (
    graph_id TEXT,
    kind TEXT,
    node_name TEXT,
    exec_order INTEGER,
    detail TEXT,
    PRIMARY KEY (graph_id, kind)
)""",
    "CREATE TABLE tbprobe_edges (graph_id TEXT, src TEXT, dst TEXT, dst_slot TEXT)",
    "CREATE INDEX tbprobe_edges_dst ON tbprobe_edges (graph_id, dst)",
)

# Scripts for executescript(): SCHEMA_TABLES_SQL + SCHEMA_INDEXES_SQL is the reference's schema.sql.
SCHEMA_TABLES_SQL = "".join(s + ";\n" for s in TABLE_STATEMENTS)
SCHEMA_INDEXES_SQL = "".join(s + ";\n" for s in INDEX_STATEMENTS)
TBPROBE_TABLES_SQL = "".join(s + ";\n" for s in TBPROBE_TABLE_STATEMENTS)

NODE_COLUMNS: Tuple[str, ...] = (
    "id", "graph_id", "node_order", "node_name", "node_type", "up_node", "sub_nodes", "precision_index",
    "overflow_level", "micro_step_id", "matched_node_link", "stack_id", "parallel_merge_info", "matched_distributed",
    "modified", "input_data", "output_data", "data_source", "dump_data_dir", "step", "rank", "is_distributed",
)  # fmt: skip
CONFIG_COLUMNS: Tuple[str, ...] = (
    "id", "graph_type", "task", "tool_tip", "micro_steps", "overflow_check", "node_colors", "rank_list", "step_list",
)  # fmt: skip
NODE_EXT_COLUMNS: Tuple[str, ...] = ("id", "exec_order", "subtree_precision", "subtree_overflow", "worst_metric", "flags")
FINDING_COLUMNS: Tuple[str, ...] = ("graph_id", "kind", "node_name", "exec_order", "detail")
EDGE_COLUMNS: Tuple[str, ...] = ("graph_id", "src", "dst", "dst_slot")
