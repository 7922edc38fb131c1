// src/api/client.ts
var e = class extends Error {
	status;
	constructor(e, t) {
		super(t), this.status = e, this.name = "ApiError";
	}
};
function t(e, t = {}) {
	let n = new URLSearchParams();
	for (let [e, r] of Object.entries(t)) r != null && (Array.isArray(r) ? r.length && n.set(e, r.join(",")) : typeof r == "boolean" ? n.set(e, r ? "1" : "0") : n.set(e, String(r)));
	let r = n.toString();
	return `api/${e}${r ? "?" + r : ""}`;
}
function n(e) {
	return new URL(".", e).href;
}
var r = class {
	base;
	fetchFn;
	cache = /* @__PURE__ */ new Map();
	constructor(e, t) {
		this.base = e, this.fetchFn = t ?? ((e, t) => fetch(e, t));
	}
	url(e, n = {}) {
		return new URL(t(e, n), this.base).href;
	}
	clearCache() {
		this.cache.clear();
	}
	async request(t, n) {
		let r;
		try {
			r = await this.fetchFn(t, n);
		} catch (t) {
			throw new e(0, `network error: ${t.message}`);
		}
		let i = await r.text(), a = null;
		try {
			a = i ? JSON.parse(i) : null;
		} catch {
			a = null;
		}
		if (!r.ok) {
			let t = a && typeof a == "object" && "error" in a ? String(a.error) : `HTTP ${r.status}`;
			throw new e(r.status, t);
		}
		if (a === null && i) throw new e(r.status, "the server sent something that is not JSON");
		return a;
	}
	get(e, t = {}, n = !1) {
		let r = this.url(e, t);
		if (!n) return this.request(r);
		let i = this.cache.get(r);
		return i || (i = this.request(r), this.cache.set(r, i), i.catch(() => this.cache.delete(r))), i;
	}
	post(e, t) {
		return this.request(this.url(e), {
			method: "POST",
			headers: { "Content-Type": "application/json" },
			body: JSON.stringify(t),
			credentials: "same-origin"
		});
	}
	runs() {
		return this.get("runs");
	}
	meta(e) {
		return this.get("meta", {
			run: e.run,
			file: e.file
		});
	}
	root(e) {
		return this.get("root", { ...e }, !0);
	}
	children(e, t, n = -1, r = 0, i = 5e3) {
		return this.get("children", {
			...e,
			node: t,
			micro_step: n >= 0 ? n : void 0,
			offset: r,
			limit: i
		}, !0);
	}
	async allChildren(e, t, n = -1) {
		let r = await this.children(e, t, n, 0, 5e4), i = r.children;
		for (; i.length < r.total;) {
			let r = await this.children(e, t, n, i.length, 5e4);
			if (!r.children.length) break;
			i = i.concat(r.children);
		}
		return {
			...r,
			children: i
		};
	}
	node(e, t) {
		return this.get("node", {
			...e,
			node: t
		}, !0);
	}
	search(e, t, n, r = 0, i = 100) {
		return this.get("search", {
			...e,
			q: t,
			regex: n,
			offset: r,
			limit: i
		});
	}
	filter(e, t) {
		return this.get("filter", {
			...e,
			...t
		});
	}
	async allFiltered(e, t = {}) {
		let n = await this.filter(e, {
			...t,
			limit: 5e4
		}), r = n.items;
		for (; r.length < n.total;) {
			let n = await this.filter(e, {
				...t,
				offset: r.length,
				limit: 5e4
			});
			if (!n.items.length) break;
			r = r.concat(n.items);
		}
		return {
			total: n.total,
			items: r
		};
	}
	compareTable(e, t) {
		return this.get("compare_table", {
			...e,
			...t
		});
	}
	compareCsvUrl(e, t) {
		return this.url("compare_table", {
			...e,
			...t,
			format: "csv"
		});
	}
	findings(e) {
		return this.get("findings", { ...e });
	}
	overflow(e) {
		return this.get("overflow", { ...e });
	}
	matches(e) {
		return this.get("matches", { ...e });
	}
	match(e, t, n, r) {
		return this.post("match", {
			...e,
			debug: t,
			bench: n,
			descendants: r
		});
	}
	unmatch(e, t, n) {
		return this.post("unmatch", {
			...e,
			debug: t,
			descendants: n
		});
	}
	legend(e) {
		return this.get("legend", { ...e });
	}
	saveLegend(e, t) {
		return this.post("legend", {
			...e,
			node_colors: t
		});
	}
	apply(e) {
		return this.post("apply", { ...e });
	}
}, i = {
	title: "GRAPH_ASCEND",
	file: "File",
	step: "Step",
	rank: "Rank",
	microStep: "Micro step",
	all: "all",
	tabGraph: "Graph",
	tabCompare: "Compare",
	tabOverflow: "Overflow",
	tabMonitor: "Monitor",
	language: "Language",
	noFiles: "No .vis.db or .vis file under the log directory. Build one with `tbprobe graph` or `msprobe graph_visualize`.",
	loading: "Loading…",
	debugSide: "Debug (NPU)",
	benchSide: "Bench",
	fit: "Fit",
	fitTitle: "Fit the graph to the screen",
	expandDepth: "Expand to depth",
	collapseAll: "Collapse all",
	colorBy: "Colour",
	colorLegend: "precision legend",
	colorOverflow: "overflow level",
	colorMetric: "metric (log scale)",
	metric: "Metric",
	worstInside: "Show worst result inside collapsed nodes",
	search: "Search",
	searchPlaceholder: "node name",
	regex: "regex",
	results: "results",
	precisionFilter: "Precision filter",
	pass: "pass",
	warning: "warning",
	error: "error",
	unmatched: "unmatched",
	overflowFilter: "Overflow filter",
	medium: "medium",
	high: "high",
	critical: "critical",
	sortBy: "Sort by",
	order: "execution order",
	name: "name",
	precision: "precision",
	descending: "descending",
	match: "Manual match",
	matchHelp: "Select a debug node and a bench node, then match them.",
	matchButton: "Match",
	unmatchButton: "Unmatch",
	descendants: "with descendants",
	loadConfig: "Load .vis.config",
	saveConfig: "Save .vis.config",
	applyEdits: "Write edits into the database (after a backup)",
	applyConfirm: "Copy the database to a backup file and write the manual matches and legend into it?",
	matchesCount: "manual matches",
	legend: "Legend",
	legendHelp: "Click a colour to change it; edits are saved to a side file.",
	nodeDetails: "Node details",
	noSelection: "Click a node to see its details.",
	inputs: "Inputs",
	outputs: "Outputs",
	parameters: "Parameters",
	stack: "Stack",
	copy: "Copy",
	copied: "Copied",
	peers: "Distributed peers",
	debug: "debug",
	bench: "bench",
	diff: "difference",
	counterpart: "Counterpart",
	none: "none",
	compareTable: "Compare table",
	firstDivergence: "Go to the first divergence",
	noDivergence: "No divergence found.",
	exportCsv: "Export CSV",
	filterRows: "Filter rows",
	rows: "rows",
	overflowList: "Overflow nodes in execution order",
	noOverflow: "No overflow in this rank.",
	first: "first",
	goToGraph: "Show in graph",
	breadcrumbsRoot: "Path",
	dumpDir: "Tensor folder",
	more: "More…",
	type: "Type"
}, a = {
	en: i,
	zh: {
		title: "GRAPH_ASCEND",
		file: "文件",
		step: "步",
		rank: "卡",
		microStep: "微步",
		all: "全部",
		tabGraph: "图",
		tabCompare: "比对",
		tabOverflow: "溢出",
		tabMonitor: "监控",
		language: "语言",
		noFiles: "日志目录下没有 .vis.db 或 .vis 文件。请用 `tbprobe graph` 或 `msprobe graph_visualize` 生成。",
		loading: "加载中…",
		debugSide: "调试侧 (NPU)",
		benchSide: "标杆侧",
		fit: "适应",
		fitTitle: "缩放到整张图",
		expandDepth: "展开到深度",
		collapseAll: "全部折叠",
		colorBy: "着色",
		colorLegend: "精度图例",
		colorOverflow: "溢出等级",
		colorMetric: "指标 (对数刻度)",
		metric: "指标",
		worstInside: "折叠节点显示内部最差结果",
		search: "搜索",
		searchPlaceholder: "节点名",
		regex: "正则",
		results: "个结果",
		precisionFilter: "精度筛选",
		pass: "通过",
		warning: "警告",
		error: "错误",
		unmatched: "未匹配",
		overflowFilter: "溢出筛选",
		medium: "中",
		high: "高",
		critical: "严重",
		sortBy: "排序",
		order: "执行顺序",
		name: "名称",
		precision: "精度",
		descending: "降序",
		match: "手动匹配",
		matchHelp: "选中一个调试侧节点和一个标杆侧节点, 然后匹配。",
		matchButton: "匹配",
		unmatchButton: "取消匹配",
		descendants: "包含子节点",
		loadConfig: "加载 .vis.config",
		saveConfig: "保存 .vis.config",
		applyEdits: "将修改写入数据库 (先备份)",
		applyConfirm: "先把数据库复制为备份文件, 再写入手动匹配和图例?",
		matchesCount: "个手动匹配",
		legend: "图例",
		legendHelp: "点击颜色可修改; 修改保存在旁路文件中。",
		nodeDetails: "节点详情",
		noSelection: "点击节点查看详情。",
		inputs: "输入",
		outputs: "输出",
		parameters: "参数",
		stack: "调用栈",
		copy: "复制",
		copied: "已复制",
		peers: "分布式通信对端",
		debug: "调试侧",
		bench: "标杆侧",
		diff: "差异",
		counterpart: "对应节点",
		none: "无",
		compareTable: "比对表",
		firstDivergence: "跳到首个差异",
		noDivergence: "未发现差异。",
		exportCsv: "导出 CSV",
		filterRows: "筛选行",
		rows: "行",
		overflowList: "按执行顺序的溢出节点",
		noOverflow: "该卡没有溢出。",
		first: "首个",
		goToGraph: "在图中显示",
		breadcrumbsRoot: "路径",
		dumpDir: "张量目录",
		more: "更多…",
		type: "类型"
	}
}, o = "en";
function s(e) {
	o = e;
}
function c() {
	return o;
}
function l(e) {
	return a[o][e] ?? i[e];
}
function u(e) {
	return e.some((e) => e.toLowerCase().startsWith("zh")) ? "zh" : "en";
}
function d(e, t, n) {
	return {
		name: e.name,
		summary: e,
		parent: t,
		children: null,
		expanded: !1,
		index: n,
		depth: t ? t.depth + 1 : 0,
		x: 0,
		y: 0,
		w: 220,
		h: 26
	};
}
function f(e) {
	return e <= 6 ? 1 : Math.max(2, Math.min(40, Math.round(Math.sqrt(e / 2))));
}
function p(e) {
	let t = f(e), n = new Float64Array(e * 2);
	for (let r = 0; r < e; r++) n[2 * r] = 8 + r % t * 226, n[2 * r + 1] = 24 + Math.floor(r / t) * 32;
	let r = Math.ceil(e / t);
	return {
		xy: n,
		w: Math.max(220, 16 + Math.min(t, e) * 226 - 6),
		h: e ? 24 + r * 32 - 6 + 8 : 26
	};
}
function m(e, t = 0) {
	let n = e.children;
	if (!e.expanded || !n || n.length === 0) {
		e.w = 220, e.h = 26, e.expanded && (e.h = 32);
		return;
	}
	let r = f(n.length), i = Math.max(0, Math.min(t, n.length - 1));
	for (; i > 0 && n[i - 1].y === n[i].y;) i--;
	if (i > 0) for (i--; i > 0 && n[i - 1].y === n[i].y;) i--;
	let a = i === 0 ? 24 : n[i].y, o = 0, s = 0;
	for (let e = i; e < n.length; e++) {
		let t = n[e];
		t.expanded ? (o > 0 && (a += s + 6, o = 0, s = 0), t.x = 8, t.y = a, a += t.h + 6) : (o === r && (a += s + 6, o = 0, s = 0), t.x = 8 + o * 226, t.y = a, s = Math.max(s, t.h), o++);
	}
	o > 0 && (a += s + 6);
	let c = 220;
	for (let e of n) c = Math.max(c, e.x + e.w + 8);
	e.w = c, e.h = a - 6 + 8;
}
function h(e) {
	let t = e;
	for (; t.parent;) m(t.parent, t.index), t = t.parent;
}
function g(e, t, n) {
	let r = t.map((t, n) => d(t, e, n));
	if (n && n.length === r.length * 2) for (let e = 0; e < r.length; e++) r[e].x = n[2 * e], r[e].y = n[2 * e + 1];
	return e.children = r, r;
}
function _(e, t) {
	if (!e.children) throw Error(`children of ${e.name} are not loaded`);
	e.expanded = !0, t && e.children.every((e) => !e.expanded) ? (e.w = t.w, e.h = t.h) : m(e, 0), h(e);
}
function ee(e) {
	e.expanded = !1, e.w = 220, e.h = 26, h(e);
}
function v(e) {
	let t = 0, n = 0;
	for (let r = e; r; r = r.parent) t += r.x, n += r.y;
	return {
		x: t,
		y: n
	};
}
function te(e) {
	for (let t = e.parent; t; t = t.parent) if (!t.expanded) return !1;
	return !0;
}
function y(e, t) {
	let n = 0, r = e.length;
	for (; n < r;) {
		let i = n + r >> 1;
		e[i].y + e[i].h < t ? n = i + 1 : r = i;
	}
	return n;
}
function ne(e, t, n, r, i, a) {
	let o = (e, s, c) => {
		if (s > t + r || c > n + i || s + e.w < t || c + e.h < n || a(e, s, c) === !1) return;
		let l = e.children;
		if (!e.expanded || !l) return;
		let u = n - c, d = n + i - c;
		for (let e = y(l, u); e < l.length; e++) {
			let t = l[e];
			if (t.y > d) break;
			o(t, s + t.x, c + t.y);
		}
	};
	o(e, e.x, e.y);
}
function re(e, t, n) {
	let r = e, i = e.x, a = e.y;
	if (t < i || n < a || t > i + r.w || n > a + r.h) return null;
	for (;;) {
		let e = r.children;
		if (!r.expanded || !e || !e.length) return r;
		let o = n - a, s = t - i, c = null;
		for (let t = y(e, o); t < e.length; t++) {
			let n = e[t];
			if (n.y > o) break;
			if (s >= n.x && s <= n.x + n.w && o >= n.y && o <= n.y + n.h) {
				c = n;
				break;
			}
		}
		if (!c) return r;
		i += c.x, a += c.y, r = c;
	}
}
function b(e) {
	let t = [], n = [e];
	for (; n.length;) {
		let e = n.pop();
		if (t.push(e), e.expanded && e.children) for (let t = e.children.length - 1; t >= 0; t--) n.push(e.children[t]);
	}
	return t;
}
// src/layout/raster.ts
function ie(e) {
	if (typeof OffscreenCanvas > "u") return null;
	let t = Math.max(1, Math.round(e.width)), n = Math.max(1, Math.round(e.height)), r = new OffscreenCanvas(t, n), i = r.getContext("2d");
	if (!i) return null;
	i.fillStyle = e.background, i.fillRect(0, 0, t, n);
	let a = e.rects, o = [];
	for (let t = 0; t + 5 < a.length; t += 6) {
		let n = a[t + 5];
		(o[n] ?? (o[n] = e.colors.map(() => [])))[a[t + 4]]?.push(t);
	}
	let s = e.scale;
	for (let t of o) if (t) for (let n = 0; n < e.colors.length; n++) {
		let r = t[n];
		if (r.length) {
			i.beginPath();
			for (let e of r) i.rect(a[e] * s, a[e + 1] * s, Math.max(.5, a[e + 2] * s), Math.max(.5, a[e + 3] * s));
			i.fillStyle = e.colors[n], i.fill();
		}
	}
	i.strokeStyle = e.stroke, i.lineWidth = .5, i.beginPath();
	for (let e = 0; e + 5 < a.length; e += 6) a[e + 2] * s >= 3 && a[e + 3] * s >= 3 && i.rect(a[e] * s, a[e + 1] * s, a[e + 2] * s, a[e + 3] * s);
	return i.stroke(), r.transferToImageBitmap();
}
var ae = class {
	worker = null;
	seq = 0;
	pending = /* @__PURE__ */ new Map();
	constructor(e) {
		if (e && typeof Worker < "u") try {
			this.worker = new Worker(e), this.worker.onmessage = (e) => {
				let t = this.pending.get(e.data.id);
				this.pending.delete(e.data.id), t?.(e.data);
			}, this.worker.onerror = () => this.fail();
		} catch {
			this.worker = null;
		}
	}
	get usesWorker() {
		return this.worker !== null;
	}
	fail() {
		this.worker?.terminate(), this.worker = null;
		let e = [...this.pending.values()];
		this.pending.clear();
		for (let t of e) t({
			id: -1,
			kind: "error"
		});
	}
	call(e, t = []) {
		return new Promise((n) => {
			if (!this.worker) return n({
				id: -1,
				kind: "error"
			});
			let r = ++this.seq;
			this.pending.set(r, n), this.worker.postMessage({
				...e,
				id: r
			}, t);
		});
	}
	async grid(e) {
		if (e >= 4e3 && this.worker) {
			let t = await this.call({
				id: 0,
				kind: "grid",
				n: e
			});
			if (t.kind === "grid") return {
				xy: t.xy,
				w: t.w,
				h: t.h
			};
		}
		return p(e);
	}
	async minimap(e) {
		if (this.worker && typeof OffscreenCanvas < "u") {
			let t = await this.call({
				id: 0,
				kind: "minimap",
				job: e
			}, [e.rects.buffer]);
			if (t.kind === "minimap") return t.bitmap;
		}
		return ie(e);
	}
}, oe = {
	"#FFFCF3": {
		value: [0, .3],
		description: "pass",
		accuracy_level: "pass"
	},
	"#FFDC7F": {
		value: [.3, .6],
		description: "warning",
		accuracy_level: "warning"
	},
	"#FF704D": {
		value: [.6, 1],
		description: "error",
		accuracy_level: "error"
	},
	"#C7C7C7": {
		value: [],
		description: "unmatched",
		accuracy_level: "unmatched node"
	}
}, x = {
	medium: "#B6C7FC",
	high: "#7E96F0",
	critical: "#4668B8"
}, S = {
	medium: 1,
	high: 2,
	critical: 3
}, se = {
	dark: !1,
	background: "#ffffff",
	text: "#202124",
	mutedText: "#5f6368",
	stroke: "#9aa0a6",
	neutral: "#F2F4F7",
	selection: "#1a73e8",
	counterpart: "#e8710a",
	highlight: "#d93025"
}, ce = {
	dark: !0,
	background: "#202124",
	text: "#e8eaed",
	mutedText: "#9aa0a6",
	stroke: "#5f6368",
	neutral: "#3c4043",
	selection: "#8ab4f8",
	counterpart: "#fcad70",
	highlight: "#f28b82"
};
function C(e) {
	for (let [t, n] of Object.entries(e)) if (!n.value || n.value.length === 0) return t;
	return null;
}
function le(e, t, n) {
	if (e == null || Number.isNaN(e)) return n ? C(t) : null;
	let r = null, i = -1e400;
	for (let [n, a] of Object.entries(t)) {
		if (!a.value || a.value.length !== 2) continue;
		let [t, o] = a.value;
		if (e >= t && e < o) return n;
		e === o && o >= i && (r = n, i = o);
	}
	return r;
}
function ue(e) {
	let t = [];
	for (let [n, r] of Object.entries(e)) r.value && r.value.length === 2 && t.push([
		r.value[0],
		r.value[1],
		n
	]);
	let n = C(e), r = /* @__PURE__ */ new Map();
	return (t, i) => {
		if (t == null || Number.isNaN(t)) return i ? n : null;
		let a = r.get(t);
		return a === void 0 && (a = le(t, e, !0), r.set(t, a)), a;
	};
}
function w(e) {
	let t = e.replace("#", ""), n = t.length === 3 ? t.split("").map((e) => e + e).join("") : t, r = parseInt(n.slice(0, 6), 16);
	return [
		r >> 16 & 255,
		r >> 8 & 255,
		r & 255
	];
}
function de(e, t, n) {
	let r = (e) => Math.max(0, Math.min(255, Math.round(e))).toString(16).padStart(2, "0");
	return `#${r(e)}${r(t)}${r(n)}`;
}
function T(e, t, n) {
	let [r, i, a] = w(e), [o, s, c] = w(t);
	return de(r + (o - r) * n, i + (s - i) * n, a + (c - a) * n);
}
var E = [
	"#fff5d6",
	"#fdd17f",
	"#f99b4e",
	"#e5533a",
	"#b3123c",
	"#6b0343"
];
function fe(e, t = E) {
	let n = 1e400, r = -1e400;
	for (let t of e) t > 0 && Number.isFinite(t) && (t < n && (n = t), t > r && (r = t));
	let i = Math.log10(n), a = Math.log10(r), o = (e) => !(e > 0) || !Number.isFinite(n) ? 0 : Number.isFinite(e) ? a === i ? .5 : Math.max(0, Math.min(1, (Math.log10(e) - i) / (a - i))) : 1;
	return {
		min: n,
		max: r,
		t: o,
		color(e) {
			if (e == null || Number.isNaN(e)) return null;
			let n = o(Math.abs(e)) * (t.length - 1), r = Math.min(t.length - 2, Math.floor(n));
			return T(t[r], t[r + 1], n - r);
		}
	};
}
function pe(e) {
	let [t, n, r] = w(e);
	return .299 * t + .587 * n + .114 * r > 140 ? "#202124" : "#f8f9fa";
}
// src/state/state.ts
function D() {
	return {
		run: "",
		file: "",
		step: 0,
		rank: 0,
		microStep: -1,
		tab: "graph",
		selected: null,
		expanded: {
			NPU: [],
			Bench: []
		},
		colorMode: "legend",
		metric: "",
		worstInside: !0,
		search: "",
		regex: !1,
		precisionFilter: [],
		overflowFilter: [],
		lang: "en"
	};
}
var me = class {
	state;
	listeners = [];
	constructor(e) {
		this.state = e;
	}
	subscribe(e) {
		return this.listeners.push(e), () => {
			this.listeners = this.listeners.filter((t) => t !== e);
		};
	}
	set(e) {
		let t = /* @__PURE__ */ new Set();
		for (let n of Object.keys(e)) JSON.stringify(this.state[n]) !== JSON.stringify(e[n]) && t.add(n);
		if (t.size) {
			this.state = {
				...this.state,
				...e
			};
			for (let e of this.listeners) e(this.state, t);
		}
	}
}, he = [
	"graph",
	"compare",
	"overflow",
	"monitor"
], ge = [
	"legend",
	"overflow",
	"metric"
], O = "\n";
function k(e, t) {
	return e === null || !/^-?\d+$/.test(e) ? t : parseInt(e, 10);
}
function A(e) {
	return e ? e.split(O).filter((e) => e.length > 0) : [];
}
function _e(e) {
	let t = D(), n = new URLSearchParams();
	return e.run && n.set("run", e.run), e.file && n.set("file", e.file), e.step !== t.step && n.set("step", String(e.step)), e.rank !== t.rank && n.set("rank", String(e.rank)), e.microStep !== t.microStep && n.set("ms", String(e.microStep)), e.tab !== t.tab && n.set("tab", e.tab), e.selected && n.set("sel", `${e.selected.side}:${e.selected.name}`), e.expanded.NPU.length && n.set("xn", e.expanded.NPU.join(O)), e.expanded.Bench.length && n.set("xb", e.expanded.Bench.join(O)), e.colorMode !== t.colorMode && n.set("color", e.colorMode), e.metric && n.set("metric", e.metric), e.worstInside || n.set("worst", "0"), e.search && n.set("q", e.search), e.regex && n.set("re", "1"), e.precisionFilter.length && n.set("pf", e.precisionFilter.join(",")), e.overflowFilter.length && n.set("of", e.overflowFilter.join(",")), e.lang !== t.lang && n.set("lang", e.lang), n.toString();
}
function ve(e, t = D()) {
	let n = new URLSearchParams(e.replace(/^[#?]/, "")), r = {
		...t,
		expanded: {
			NPU: [...t.expanded.NPU],
			Bench: [...t.expanded.Bench]
		}
	}, i = (e) => n.get(e);
	i("run") !== null && (r.run = i("run")), i("file") !== null && (r.file = i("file")), r.step = k(i("step"), r.step), r.rank = k(i("rank"), r.rank), r.microStep = k(i("ms"), r.microStep);
	let a = i("tab");
	a && he.includes(a) && (r.tab = a);
	let o = i("sel");
	if (o) {
		let e = o.indexOf(":"), t = o.slice(0, e);
		e > 0 && (t === "NPU" || t === "Bench") && (r.selected = {
			side: t,
			name: o.slice(e + 1)
		});
	}
	n.has("xn") && (r.expanded.NPU = A(i("xn"))), n.has("xb") && (r.expanded.Bench = A(i("xb")));
	let s = i("color");
	s && ge.includes(s) && (r.colorMode = s), i("metric") !== null && (r.metric = i("metric")), i("worst") !== null && (r.worstInside = i("worst") !== "0"), i("q") !== null && (r.search = i("q")), i("re") !== null && (r.regex = i("re") === "1"), i("pf") !== null && (r.precisionFilter = i("pf").split(",").filter(Boolean)), i("of") !== null && (r.overflowFilter = i("of").split(",").filter(Boolean));
	let c = i("lang");
	return (c === "en" || c === "zh") && (r.lang = c), r;
}
function ye(e, t) {
	let n = e.replace(/^#/, ""), r = n ? n.split("&").filter((e) => !e.startsWith("ga=")) : [];
	return t && r.push(`ga=${encodeURIComponent(t)}`), "#" + r.join("&");
}
function be(e) {
	for (let t of e.replace(/^#/, "").split("&")) if (t.startsWith("ga=")) try {
		return decodeURIComponent(t.slice(3));
	} catch {
		return null;
	}
	return null;
}
// src/views/monitor/api.ts
var xe = class {
	base;
	constructor(e) {
		this.base = e;
	}
	async get(e, t) {
		let n = new URLSearchParams();
		for (let [e, r] of t) r != null && r !== "" && n.append(e, String(r));
		let r = `${this.base}/api/monitor/${e}${n.toString() ? "?" + n.toString() : ""}`, i = await fetch(r, { credentials: "same-origin" }), a;
		try {
			a = await i.json();
		} catch {
			throw Error(`${i.status} ${i.statusText}`);
		}
		if (!i.ok) {
			let e = a.error;
			throw Error(e || `${i.status} ${i.statusText}`);
		}
		return a;
	}
	jobs() {
		return this.get("runs", []);
	}
	heatmap(e) {
		return this.get("heatmap", Object.entries(e));
	}
	series(e, t, n = 1e3) {
		let r = [["job", e], ["points", n]];
		for (let e of t) r.push(["s", `${e.rank}|${e.module}|${e.metric}|${e.op}`]);
		return this.get("series", r);
	}
	anomalies(e, t = 500) {
		return this.get("anomalies", [["job", e], ["limit", t]]);
	}
};
function j(e) {
	return e === null ? null : e === "nan" ? NaN : e === "inf" ? 1e400 : e === "-inf" ? -1e400 : e;
}
// src/views/monitor/colors.ts
var M = [
	[
		68,
		1,
		84
	],
	[
		59,
		82,
		139
	],
	[
		33,
		145,
		140
	],
	[
		94,
		201,
		98
	],
	[
		253,
		231,
		37
	]
];
function Se(e) {
	let t = Math.min(1, Math.max(0, e)) * (M.length - 1), n = Math.min(M.length - 2, Math.floor(t)), r = t - n, i = M[n], a = M[n + 1], o = (e) => Math.round(i[e] + (a[e] - i[e]) * r);
	return `rgb(${o(0)},${o(1)},${o(2)})`;
}
var Ce = "#e040fb", we = "#d50000", Te = "#00b8d4", N = "#ff6d00", P = [
	"#1a73e8",
	"#e8710a",
	"#188038",
	"#d93025",
	"#9334e6",
	"#12b5cb",
	"#f9ab00",
	"#b31412"
];
function F(e) {
	let t = getComputedStyle(e), n = (e, n) => t.getPropertyValue(e).trim() || n;
	return {
		fg: n("--fg", "#202124"),
		muted: n("--muted", "#5f6368"),
		line: n("--line", "#dadce0"),
		bg: n("--bg", "#ffffff")
	};
}
function I(e, t, n) {
	let r = window.devicePixelRatio || 1;
	e.style.width = `${t}px`, e.style.height = `${n}px`, e.width = Math.max(1, Math.round(t * r)), e.height = Math.max(1, Math.round(n * r));
	let i = e.getContext("2d");
	return i.setTransform(r, 0, 0, r, 0, 0), i;
}
function L(e) {
	if (Number.isNaN(e)) return "NaN";
	if (!Number.isFinite(e)) return e > 0 ? "+Inf" : "-Inf";
	let t = Math.abs(e);
	return t !== 0 && (t < .001 || t >= 1e5) ? e.toExponential(3) : String(Number(e.toPrecision(5)));
}
// src/views/monitor/chart.ts
var R = {
	l: 64,
	r: 12,
	t: 12,
	b: 26
}, Ee = class {
	canvas;
	series = [];
	marker = null;
	constructor() {
		this.canvas = document.createElement("canvas"), this.canvas.dataset.testid = "monitor-chart", this.canvas.className = "mon-chart";
	}
	set(e, t) {
		this.series = e, this.marker = t, this.draw();
	}
	pointCount() {
		return this.series.reduce((e, t) => e + t.points.length, 0);
	}
	draw() {
		let e = Math.max(300, (this.canvas.parentElement?.clientWidth || 800) - 4), t = I(this.canvas, e, 240), n = F(this.canvas);
		if (t.clearRect(0, 0, e, 240), !this.series.length) return;
		let r = 1e400, i = -1e400, a = 1e400, o = -1e400;
		for (let e of this.series) for (let [t, n] of e.points) {
			r = Math.min(r, t), i = Math.max(i, t);
			let e = j(n);
			e !== null && Number.isFinite(e) && (a = Math.min(a, e), o = Math.max(o, e));
		}
		if (!Number.isFinite(r)) return;
		Number.isFinite(a) || (a = 0, o = 1), o === a && (a -= .5, o += .5);
		let s = (o - a) * .05;
		a -= s, o += s, i === r && (i = r + 1);
		let c = e - R.l - R.r, l = 240 - R.t - R.b, u = (e) => R.l + (e - r) / (i - r) * c, d = (e) => R.t + (1 - (e - a) / (o - a)) * l;
		t.strokeStyle = n.line, t.fillStyle = n.muted, t.font = "11px sans-serif", t.lineWidth = 1;
		for (let n = 0; n <= 4; n++) {
			let s = a + (o - a) * n / 4, c = d(s);
			t.beginPath(), t.moveTo(R.l, c), t.lineTo(e - R.r, c), t.stroke(), t.textAlign = "right", t.textBaseline = "middle", t.fillText(L(s), R.l - 4, c);
			let l = Math.round(r + (i - r) * n / 4);
			t.textAlign = "center", t.textBaseline = "top", t.fillText(String(l), u(l), 240 - R.b + 6);
		}
		this.marker !== null && this.marker >= r && this.marker <= i && (t.strokeStyle = N, t.setLineDash([4, 3]), t.beginPath(), t.moveTo(u(this.marker), R.t), t.lineTo(u(this.marker), R.t + l), t.stroke(), t.setLineDash([])), this.series.forEach((e, n) => {
			t.strokeStyle = P[n % P.length], t.lineWidth = 1.5, t.beginPath();
			let r = !1;
			for (let [n, i] of e.points) {
				let e = j(i);
				e === null || !Number.isFinite(e) ? r = !1 : (r ? t.lineTo(u(n), d(e)) : t.moveTo(u(n), d(e)), r = !0);
			}
			t.stroke(), t.fillStyle = we;
			for (let [n, r] of e.points) {
				let e = j(r);
				e !== null && !Number.isFinite(e) && t.fillRect(u(n) - 1, R.t, 3, 8);
			}
		});
	}
};
// src/views/monitor/dom.ts
function z(e, t = "", n = "", r = "") {
	let i = document.createElement(e);
	return t && (i.className = t), n && (i.dataset.testid = n), r && (i.textContent = r), i;
}
function B(e, t, n) {
	let r = z("select", "mon-select", e);
	return V(r, t, n), r;
}
function V(e, t, n) {
	for (; e.firstChild;) e.removeChild(e.firstChild);
	for (let [r, i] of t) {
		let t = document.createElement("option");
		t.value = r, t.textContent = i, t.selected = r === n, e.append(t);
	}
}
function H(e, t) {
	let n = z("label", "mon-field");
	return n.append(z("span", "mon-label", "", e), t), n;
}
var De = "\n.mon-root { display:flex; flex-direction:column; gap:8px; padding:8px; color:var(--fg,#202124);\n  background:var(--bg,#fff); font:13px sans-serif; box-sizing:border-box; }\n.mon-toolbar { display:flex; flex-wrap:wrap; gap:10px; align-items:flex-end; }\n.mon-field { display:flex; flex-direction:column; gap:2px; }\n.mon-label { font-size:11px; color:var(--muted,#5f6368); }\n.mon-select, .mon-input { font:inherit; color:inherit; background:var(--panel,#f8f9fa);\n  border:1px solid var(--line,#dadce0); border-radius:4px; padding:2px 4px; }\n.mon-main { display:flex; gap:8px; align-items:flex-start; }\n.mon-left { flex:1 1 auto; min-width:0; }\n.mon-side { flex:0 0 300px; max-height:560px; overflow:auto; border:1px solid var(--line,#dadce0);\n  border-radius:4px; }\n.mon-side h3, .mon-chart-box h3 { margin:0; padding:4px 8px; font-size:12px; background:var(--panel,#f8f9fa); }\n.mon-anomaly { display:block; width:100%; text-align:left; border:0; border-top:1px solid var(--line,#dadce0);\n  background:transparent; color:inherit; font:12px sans-serif; padding:4px 8px; cursor:pointer; }\n.mon-anomaly:hover { background:var(--hover,#e8f0fe); }\n.mon-anomaly .mon-rule { color:#d93025; font-weight:600; }\n.mon-pager { display:flex; gap:8px; align-items:center; margin:4px 0; color:var(--muted,#5f6368); }\n.mon-pager button, .mon-btn { font:inherit; color:inherit; background:var(--panel,#f8f9fa);\n  border:1px solid var(--line,#dadce0); border-radius:4px; padding:2px 8px; cursor:pointer; }\n.mon-heatmap { display:block; cursor:crosshair; }\n.mon-chart { display:block; }\n.mon-legend { display:flex; flex-wrap:wrap; gap:6px; padding:4px 8px; }\n.mon-legend-item { display:flex; gap:4px; align-items:center; font-size:12px; }\n.mon-swatch { width:12px; height:3px; display:inline-block; }\n.mon-tooltip { position:fixed; pointer-events:none; background:var(--panel,#f8f9fa); color:inherit;\n  border:1px solid var(--line,#dadce0); padding:3px 6px; font-size:12px; border-radius:4px; z-index:10;\n  white-space:nowrap; }\n.mon-status { color:var(--muted,#5f6368); font-size:12px; min-height:16px; }\n.mon-error { color:#d93025; }\n.mon-hint { color:var(--muted,#5f6368); font-size:12px; padding:4px 8px; }\n";
function Oe(e) {
	if (e.getElementById("tbprobe-monitor-style")) return;
	let t = e.createElement("style");
	t.id = "tbprobe-monitor-style", t.textContent = De, e.head.append(t);
}
// src/views/monitor/heatmap.ts
var U = 170, W = 22, ke = class {
	canvas;
	data = null;
	scale = "row";
	highlight = null;
	cellW = 0;
	cellH = 0;
	onCell = () => {};
	onHover = () => {};
	onLeave = () => {};
	constructor() {
		this.canvas = document.createElement("canvas"), this.canvas.dataset.testid = "monitor-heatmap", this.canvas.className = "mon-heatmap", this.canvas.addEventListener("click", (e) => {
			let t = this.hit(e.offsetX, e.offsetY);
			t && this.onCell(t.row, t.col);
		}), this.canvas.addEventListener("mousemove", (e) => {
			let t = this.hit(e.offsetX, e.offsetY);
			t ? this.onHover(t.row, t.col, e.clientX, e.clientY) : this.onLeave();
		}), this.canvas.addEventListener("mouseleave", () => this.onLeave());
	}
	set(e, t, n) {
		this.data = e, this.scale = t, this.highlight = n, this.draw();
	}
	get rows() {
		return this.data ? this.data.rows.length : 0;
	}
	get cols() {
		return this.data && this.data.values.length ? this.data.values[0].length : this.data ? this.data.cols.length : 0;
	}
	cellRect(e, t) {
		return !this.data || e < 0 || t < 0 || e >= this.rows || t >= this.cols ? null : {
			x: U + t * this.cellW,
			y: W + e * this.cellH,
			w: this.cellW,
			h: this.cellH
		};
	}
	hit(e, t) {
		if (!this.data || e < U || t < W || this.cellW <= 0) return null;
		let n = Math.floor((e - U) / this.cellW), r = Math.floor((t - W) / this.cellH);
		return r < this.rows && n < this.cols ? {
			row: r,
			col: n
		} : null;
	}
	columnsThatFit() {
		let e = (this.canvas.parentElement?.clientWidth || 800) - U - 4;
		return Math.max(10, Math.min(400, Math.floor(e / 3)));
	}
	draw() {
		let e = Math.max(300, (this.canvas.parentElement?.clientWidth || 800) - 4), t = this.rows;
		this.cellH = t ? Math.max(8, Math.min(20, Math.floor(520 / t))) : 0;
		let n = W + t * this.cellH + 4, r = I(this.canvas, e, n), i = F(this.canvas);
		if (r.clearRect(0, 0, e, n), !this.data || !t) return;
		let a = this.cols;
		this.cellW = (e - U) / Math.max(1, a);
		let o = this.scale === "log", s = (e) => o ? Math.log10(Math.abs(e) + 1e-30) : e, c = 1e400, l = -1e400;
		if (o) for (let e of this.data.values) for (let t of e) {
			let e = j(t);
			e !== null && Number.isFinite(e) && (c = Math.min(c, s(e)), l = Math.max(l, s(e)));
		}
		r.font = "11px sans-serif", r.textBaseline = "middle", this.data.values.forEach((e, t) => {
			let n = c, a = l;
			if (!o) {
				n = 1e400, a = -1e400;
				for (let t of e) {
					let e = j(t);
					e !== null && Number.isFinite(e) && (n = Math.min(n, e), a = Math.max(a, e));
				}
			}
			let u = W + t * this.cellH;
			e.forEach((e, t) => {
				let i = j(e);
				if (i === null) return;
				let o;
				o = Number.isNaN(i) ? Ce : Number.isFinite(i) ? Se(a > n ? (s(i) - n) / (a - n) : .5) : i > 0 ? we : Te, r.fillStyle = o, r.fillRect(U + t * this.cellW, u, Math.ceil(this.cellW), this.cellH - +(this.cellH > 10));
			}), r.fillStyle = i.fg, r.fillText(this.fitLabel(r, this.data.rows[t], 162), 4, u + this.cellH / 2);
		}), r.fillStyle = i.muted;
		let u = this.data.cols, d = Math.max(1, Math.ceil(u.length / Math.max(1, Math.floor((e - U) / 70))));
		for (let e = 0; e < u.length; e += d) {
			let t = u[e], n = String(Array.isArray(t) ? t[0] : t);
			r.fillText(n, U + e * this.cellW + 1, W / 2);
		}
		if (this.highlight) {
			let e = this.cellRect(this.highlight.row, this.highlight.col);
			e && (r.strokeStyle = N, r.lineWidth = 2, r.strokeRect(e.x - 1, e.y - 1, Math.max(4, e.w + 2), e.h + 2));
		}
	}
	fitLabel(e, t, n) {
		if (e.measureText(t).width <= n) return t;
		let r = t;
		for (; r.length > 4 && e.measureText("…" + r).width > n;) r = r.slice(1);
		return "…" + r;
	}
}, Ae = {
	job: "Job",
	mode: "View",
	metric: "Metric",
	stat: "Statistic",
	rank: "Rank",
	filter: "Filter modules",
	filterHint: "layers.3, attn",
	step: "Step",
	scale: "Colour",
	scaleRow: "per row",
	scaleLog: "log |value|",
	step_module: "step × module",
	step_rank: "step × rank",
	module_rank: "module × rank",
	anomalies: "Anomalies",
	noAnomalies: "No anomalies recorded.",
	chart: "Series",
	clear: "Clear",
	noJobs: "No monitor runs in this log directory. Record some with tbprobe.TrainerMon (see docs/monitor.md).",
	loading: "Loading…",
	rows: "rows",
	prev: "◀ Previous",
	next: "Next ▶",
	module: "Module",
	clickHint: "Click a cell to plot its series; click more cells to compare them side by side.",
	remove: "Remove"
}, je = {
	job: "任务",
	mode: "视图",
	metric: "指标",
	stat: "统计量",
	rank: "卡号",
	filter: "筛选模块",
	filterHint: "layers.3, attn",
	step: "步",
	scale: "配色",
	scaleRow: "按行",
	scaleLog: "对数 |值|",
	step_module: "步 × 模块",
	step_rank: "步 × 卡",
	module_rank: "模块 × 卡",
	anomalies: "异常",
	noAnomalies: "没有记录到异常。",
	chart: "曲线",
	clear: "清除",
	noJobs: "日志目录中没有监控数据。请用 tbprobe.TrainerMon 记录（见 docs/monitor.md）。",
	loading: "加载中…",
	rows: "行",
	prev: "◀ 上一页",
	next: "下一页 ▶",
	module: "模块",
	clickHint: "点击单元格绘制其曲线；再点击其他单元格可并排比较。",
	remove: "移除"
};
function Me(e) {
	return e === "zh" ? je : Ae;
}
// src/views/monitor/index.ts
var G = 200, Ne = 8, Pe = class {
	api;
	t;
	jobs = [];
	job = null;
	mode = "step_module";
	metric = "";
	op = "norm";
	rank = 0;
	filter = "";
	step = null;
	scale = "row";
	offset = 0;
	data = null;
	highlight = null;
	specs = [];
	series = [];
	marker = null;
	anomalyItems = [];
	loadToken = 0;
	ready = !1;
	heat = new ke();
	chart = new Ee();
	jobSel;
	modeSel;
	metricSel;
	opSel;
	rankSel;
	filterIn;
	stepIn;
	scaleSel;
	status = z("div", "mon-status", "monitor-status");
	pager = z("div", "mon-pager", "monitor-pager");
	anomalyBox = z("div", "", "monitor-anomalies");
	legend = z("div", "mon-legend", "monitor-legend");
	tooltip = z("div", "mon-tooltip", "monitor-tooltip");
	constructor(e, t) {
		this.api = new xe(t.apiBase), this.t = Me(t.lang);
		let n = this.t;
		Oe(e.ownerDocument), this.jobSel = B("monitor-job", [], ""), this.modeSel = B("monitor-mode", [
			"step_module",
			"step_rank",
			"module_rank"
		].map((e) => [e, n[e]]), this.mode), this.metricSel = B("monitor-metric", [], ""), this.opSel = B("monitor-op", [], ""), this.rankSel = B("monitor-rank", [], ""), this.filterIn = z("input", "mon-input", "monitor-filter"), this.filterIn.placeholder = n.filterHint, this.stepIn = z("input", "mon-input", "monitor-step"), this.stepIn.type = "number", this.stepIn.style.width = "7em", this.scaleSel = B("monitor-scale", [["row", n.scaleRow], ["log", n.scaleLog]], this.scale);
		let r = z("div", "mon-root", "monitor-root"), i = z("div", "mon-toolbar", "monitor-toolbar");
		i.append(H(n.job, this.jobSel), H(n.mode, this.modeSel), H(n.metric, this.metricSel), H(n.stat, this.opSel), H(n.rank, this.rankSel), H(n.filter, this.filterIn), H(n.step, this.stepIn), H(n.scale, this.scaleSel));
		let a = z("div", "mon-left");
		a.append(this.pager, this.heat.canvas);
		let o = z("div", "mon-side");
		o.append(z("h3", "", "", n.anomalies), this.anomalyBox);
		let s = z("div", "mon-main");
		s.append(a, o);
		let c = z("div", "mon-chart-box", "monitor-chart-box"), l = z("button", "mon-btn", "monitor-clear-series", n.clear), u = z("h3", "", "", n.chart + " ");
		u.append(l), c.append(u, z("div", "mon-hint", "", n.clickHint), this.legend, this.chart.canvas), this.tooltip.style.display = "none", r.append(i, this.status, s, c, this.tooltip), e.append(r), this.jobSel.onchange = () => this.selectJob(this.jobSel.value), this.modeSel.onchange = () => {
			this.mode = this.modeSel.value, this.offset = 0, this.load();
		}, this.metricSel.onchange = () => {
			this.metric = this.metricSel.value, this.fillOps(), this.load();
		}, this.opSel.onchange = () => {
			this.op = this.opSel.value, this.load();
		}, this.rankSel.onchange = () => {
			this.rank = Number(this.rankSel.value), this.load();
		}, this.scaleSel.onchange = () => {
			this.scale = this.scaleSel.value, this.redraw();
		};
		let d = 0;
		this.filterIn.oninput = () => {
			window.clearTimeout(d), d = window.setTimeout(() => {
				this.filter = this.filterIn.value, this.offset = 0, this.load();
			}, 250);
		}, this.stepIn.onchange = () => {
			this.step = this.stepIn.value === "" ? null : Number(this.stepIn.value), this.mode === "module_rank" && this.load();
		}, l.onclick = () => {
			this.specs = [], this.series = [], this.marker = null, this.drawChart();
		}, this.heat.onCell = (e, t) => this.clickCell(e, t), this.heat.onHover = (e, t, n, r) => this.showTip(e, t, n, r), this.heat.onLeave = () => {
			this.tooltip.style.display = "none";
		}, new ResizeObserver(() => this.redraw()).observe(a), this.installTestHook(), this.start();
	}
	async start() {
		this.setStatus(this.t.loading);
		try {
			this.jobs = (await this.api.jobs()).jobs;
		} catch (e) {
			this.setStatus(String(e.message), !0);
			return;
		}
		this.jobs.length ? (V(this.jobSel, this.jobs.map((e) => [e.job, e.job]), this.jobs[0].job), await this.selectJob(this.jobs[0].job)) : (this.setStatus(this.t.noJobs), this.ready = !0);
	}
	async selectJob(e) {
		if (this.job = this.jobs.find((t) => t.job === e) || null, !this.job) return;
		let t = Object.keys(this.job.metrics);
		this.metric = t.includes(this.metric) ? this.metric : t.includes("output") ? "output" : t[0], V(this.metricSel, t.map((e) => [e, e]), this.metric), this.fillOps(), this.rank = this.job.ranks.includes(this.rank) ? this.rank : this.job.ranks[0], V(this.rankSel, this.job.ranks.map((e) => [String(e), `rank${e}`]), String(this.rank)), this.offset = 0, this.specs = [], this.series = [], this.drawChart(), await Promise.all([this.load(), this.loadAnomalies()]);
	}
	fillOps() {
		let e = this.job && this.job.metrics[this.metric] || ["norm"];
		e.includes(this.op) || (this.op = e.includes("norm") ? "norm" : e[0]), V(this.opSel, e.map((e) => [e, e]), this.op);
	}
	moduleForMode() {
		if (this.mode === "step_rank") return this.highlight && this.data && this.data.mode !== "step_rank" ? this.highlight.row : this.specs.length ? this.specs[this.specs.length - 1].module : this.data?.rows[0];
	}
	async load(e) {
		if (!this.job) return;
		let t = ++this.loadToken;
		this.ready = !1, this.setStatus(this.t.loading);
		try {
			let n = await this.api.heatmap({
				job: this.job.job,
				metric: this.metric,
				op: this.op,
				mode: this.mode,
				rank: this.mode === "step_module" ? this.rank : void 0,
				module: this.moduleForMode(),
				step: this.mode === "module_rank" && this.step !== null ? this.step : void 0,
				filter: this.mode === "step_rank" ? void 0 : this.filter,
				offset: this.offset,
				limit: G,
				max_cols: this.heat.columnsThatFit(),
				focus: e
			});
			if (t !== this.loadToken) return;
			this.data = n, this.offset = n.offset, this.setStatus(`${n.total_rows} ${this.t.rows}`), this.drawPager(), this.redraw();
		} catch (e) {
			if (t !== this.loadToken) return;
			this.data = null, this.redraw(), this.setStatus(String(e.message), !0);
		}
		this.ready = !0;
	}
	async loadAnomalies() {
		if (!this.job) return;
		let e = this.anomalyBox;
		try {
			let e = await this.api.anomalies(this.job.job);
			this.anomalyItems = e.items;
		} catch (t) {
			this.anomalyItems = [], e.replaceChildren(z("div", "mon-hint mon-error", "", String(t.message)));
			return;
		}
		e.replaceChildren(), this.anomalyItems.length || e.append(z("div", "mon-hint", "", this.t.noAnomalies));
		for (let t of this.anomalyItems) {
			let n = z("button", "mon-anomaly", "monitor-anomaly"), r = j(t.value);
			n.append(z("span", "mon-rule", "", t.rule.replace("Anomaly", "")), ` · ${this.t.step} ${t.step} · rank${t.rank}`, z("br"), `${t.module} / ${t.metric}_${t.op} = ${r === null ? "-" : L(r)}`), n.onclick = () => void this.jump(t), e.append(n);
		}
	}
	async jump(e) {
		this.mode = "step_module", this.modeSel.value = this.mode, this.metric = e.metric, this.metricSel.value = e.metric, this.fillOps(), this.op = e.op, this.opSel.value = e.op, this.rank = e.rank, this.rankSel.value = String(e.rank), this.filter && !e.module.toLowerCase().includes(this.filter.toLowerCase()) && (this.filter = "", this.filterIn.value = ""), await this.load(e.module);
		let t = this.colOfStep(e.step);
		this.highlight = {
			row: e.module,
			col: t
		}, this.redraw(), this.addSeries({
			rank: e.rank,
			module: e.module,
			metric: e.metric,
			op: e.op
		}, e.step);
	}
	colOfStep(e) {
		let t = this.data?.cols || [];
		for (let n = 0; n < t.length; n++) {
			let r = t[n];
			if (Array.isArray(r) && e >= r[0] && e <= r[1]) return n;
		}
		return Math.max(0, t.length - 1);
	}
	clickCell(e, t) {
		let n = this.data;
		if (!n) return;
		let r, i = null;
		n.mode === "step_module" ? (r = {
			rank: n.rank ?? this.rank,
			module: n.rows[e],
			metric: n.metric,
			op: n.op
		}, i = n.cols[t][0]) : n.mode === "step_rank" ? (r = {
			rank: (n.ranks || [])[e],
			module: n.module || "",
			metric: n.metric,
			op: n.op
		}, i = n.cols[t][0]) : (r = {
			rank: (n.ranks || [])[t],
			module: n.rows[e],
			metric: n.metric,
			op: n.op
		}, i = n.step ?? null), this.highlight = {
			row: n.rows[e],
			col: t
		}, this.redraw(), this.addSeries(r, i);
	}
	addSeries(e, t) {
		this.specs.some((t) => t.rank === e.rank && t.module === e.module && t.metric === e.metric && t.op === e.op) || (this.specs.push(e), this.specs.length > Ne && this.specs.shift()), this.marker = t, this.loadSeries();
	}
	async loadSeries() {
		if (this.job) {
			if (!this.specs.length) this.series = [], this.drawChart();
			else {
				this.ready = !1;
				try {
					this.series = (await this.api.series(this.job.job, this.specs, 1e3)).series;
				} catch (e) {
					this.setStatus(String(e.message), !0);
				}
				this.drawChart(), this.ready = !0;
			}
		}
	}
	drawChart() {
		this.chart.set(this.series, this.marker), this.legend.replaceChildren(), this.series.forEach((e, t) => {
			let n = z("span", "mon-legend-item", "monitor-series-item"), r = z("span", "mon-swatch");
			r.style.background = P[t % P.length];
			let i = z("button", "mon-btn", "monitor-series-remove", "×");
			i.title = this.t.remove, i.onclick = () => {
				this.specs.splice(t, 1), this.loadSeries();
			}, n.append(r, `rank${e.rank} ${e.module} ${e.metric}_${e.op}`, i), this.legend.append(n);
		});
	}
	drawPager() {
		let e = this.data;
		if (this.pager.replaceChildren(), !e || e.total_rows <= G) return;
		let t = z("button", "", "monitor-prev", this.t.prev), n = z("button", "", "monitor-next", this.t.next);
		t.disabled = e.offset === 0, n.disabled = e.offset + G >= e.total_rows, t.onclick = () => {
			this.offset = Math.max(0, this.offset - G), this.load();
		}, n.onclick = () => {
			this.offset += G, this.load();
		}, this.pager.append(t, `${e.offset + 1}–${Math.min(e.total_rows, e.offset + G)} / ${e.total_rows}`, n);
	}
	redraw() {
		let e = this.data, t = null;
		if (e && this.highlight) {
			let n = e.rows.indexOf(this.highlight.row);
			n >= 0 && (t = {
				row: n,
				col: this.highlight.col
			});
		}
		this.heat.set(e, this.scale, t), this.chart.draw();
	}
	showTip(e, t, n, r) {
		let i = this.data;
		if (!i) return;
		let a = i.cols[t], o = Array.isArray(a) ? `${this.t.step} ${a[0]}${a[1] === a[0] ? "" : "–" + a[1]}` : a, s = j(i.values[e][t]);
		this.tooltip.textContent = `${i.rows[e]} · ${o} · ${s === null ? "-" : L(s)}`, this.tooltip.style.display = "block", this.tooltip.style.left = `${n + 12}px`, this.tooltip.style.top = `${r + 12}px`;
	}
	setStatus(e, t = !1) {
		this.status.textContent = e, this.status.classList.toggle("mon-error", t);
	}
	installTestHook() {
		let e = this;
		window.__tbprobeMonitor = {
			get ready() {
				return e.ready;
			},
			set ready(e) {},
			rows: () => e.data ? e.data.rows.slice() : [],
			cols: () => e.heat.cols,
			cellRect: (t, n) => {
				let r = e.heat.cellRect(t, n);
				if (!r) return null;
				let i = e.heat.canvas.getBoundingClientRect();
				return {
					x: i.left + r.x,
					y: i.top + r.y,
					w: r.w,
					h: r.h
				};
			},
			highlighted: () => e.highlight ? { ...e.highlight } : null,
			series: () => e.series.map((e) => `rank${e.rank}:${e.tag}`),
			anomalies: () => e.anomalyItems.length
		};
	}
};
function Fe(e, t) {
	new Pe(e, t);
}
// src/views/dom.ts
function K(e, t = {}, ...n) {
	let r = document.createElement(e);
	for (let [e, n] of Object.entries(t)) n != null && n !== !1 && (e === "class" ? r.className = String(n) : e === "testid" ? r.dataset.testid = String(n) : e === "text" ? r.textContent = String(n) : n === !0 ? r.setAttribute(e, "") : r.setAttribute(e, String(n)));
	for (let e of n) e != null && e !== !1 && r.append(typeof e == "string" ? document.createTextNode(e) : e);
	return r;
}
function q(e) {
	for (; e.firstChild;) e.removeChild(e.firstChild);
}
function J(e, t, n = !1) {
	let r = document.createElement("option");
	return r.value = e, r.textContent = t, r.selected = n, r;
}
async function Ie(e) {
	try {
		if (navigator.clipboard) return await navigator.clipboard.writeText(e), !0;
	} catch {}
	let t = K("textarea", { style: "position:fixed;left:-9999px;top:0" });
	t.value = e, document.body.append(t), t.select();
	let n = !1;
	try {
		n = document.execCommand("copy");
	} catch {
		n = !1;
	}
	return t.remove(), n;
}
function Le(e, t, n = "application/json") {
	let r = URL.createObjectURL(new Blob([t], { type: n })), i = K("a", {
		href: r,
		download: e
	});
	document.body.append(i), i.click(), i.remove(), setTimeout(() => URL.revokeObjectURL(r), 1e3);
}
function Y(e) {
	if (typeof e == "number") return e;
	if (typeof e != "string") return NaN;
	let t = e.trim().replace(/%$/, "");
	return !/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(t) && !/^[-+]?(inf|nan)$/i.test(t) ? NaN : parseFloat(t.replace(/^([-+]?)inf$/i, "$1Infinity"));
}
function Re(e, t) {
	let n = Y(e), r = Y(t), i = !Number.isNaN(n), a = !Number.isNaN(r);
	return i && a ? n - r : i ? -1 : a ? 1 : String(e ?? "").localeCompare(String(t ?? ""));
}
// src/views/format.ts
function X(e) {
	return Number.isFinite(e) ? e !== 0 && (Math.abs(e) < .001 || Math.abs(e) >= 1e5) ? e.toExponential(3) : String(Math.round(e * 1e4) / 1e4) : String(e);
}
function ze(e) {
	return e === null ? "none" : e >= .6 ? "error" : e >= .3 ? "warning" : "pass";
}
// src/views/compareView.ts
var Be = 500;
function Ve(e) {
	return e == null ? "" : String(typeof e == "number" ? Number.isInteger(e) ? e : Math.round(e * 1e6) / 1e6 : e);
}
var He = class {
	ctx;
	el;
	table;
	status;
	query;
	precision;
	csv;
	more;
	findingsBox;
	sort = "order";
	desc = !1;
	rows = [];
	columns = [];
	seq = 0;
	timer = null;
	constructor(e) {
		this.ctx = e, this.table = K("table", {
			class: "ga-table ga-compare-table",
			testid: "compare-table"
		}), this.status = K("span", { class: "ga-muted" }), this.query = K("input", {
			type: "search",
			placeholder: l("filterRows")
		}), this.query.addEventListener("input", () => {
			this.timer && clearTimeout(this.timer), this.timer = setTimeout(() => void this.reload(), 250);
		}), this.precision = K("select", {}, J("", l("all")), J("error", l("error")), J("warning", l("warning")), J("pass", l("pass")), J("unmatched", l("unmatched"))), this.precision.addEventListener("change", () => void this.reload());
		let t = K("button", {
			testid: "first-divergence-button",
			text: l("firstDivergence")
		});
		t.addEventListener("click", () => void this.firstDivergence()), this.csv = K("a", {
			class: "ga-button",
			testid: "export-csv",
			text: l("exportCsv"),
			download: "compare.csv"
		}), this.more = K("button", {
			class: "ga-small",
			text: l("more")
		}), this.more.addEventListener("click", () => void this.load(this.rows.length)), this.findingsBox = K("span", { class: "ga-muted" }), this.el = K("div", { class: "ga-compare-view" }, K("div", { class: "ga-toolbar" }, this.query, this.precision, t, this.csv, this.status, this.findingsBox), K("div", { class: "ga-scroll" }, this.table, this.more));
	}
	opts() {
		return {
			q: this.query.value || void 0,
			precision: this.precision.value || void 0,
			sort: this.sort === "order" ? void 0 : this.sort,
			desc: this.desc
		};
	}
	async reload() {
		this.rows = [];
		let e = this.ctx.graphKey();
		this.csv.href = this.ctx.api.compareCsvUrl(e, this.opts()), this.csv.download = `${e.file.replace(/\.vis(\.db)?$/, "")}_${e.step}_${e.rank}.csv`, await this.load(0);
	}
	async load(e) {
		let t = ++this.seq;
		try {
			let n = await this.ctx.api.compareTable(this.ctx.graphKey(), {
				...this.opts(),
				offset: e,
				limit: Be
			});
			if (t !== this.seq) return;
			let r = n.rows ?? n.items ?? [];
			this.columns = n.columns ?? Object.keys(r[0] ?? {}), this.rows = e ? this.rows.concat(r) : r, this.status.textContent = `${n.total} ${l("rows")}`, this.more.hidden = this.rows.length >= n.total, this.render();
		} catch (e) {
			t === this.seq && this.ctx.error(e);
		}
	}
	render() {
		q(this.table);
		let e = this.ctx.meta()?.tool_tip ?? {}, t = K("tr");
		for (let n of this.columns) {
			let r = K("th", {
				text: n,
				title: e[n],
				class: n === this.sort ? this.desc ? "ga-sort-desc" : "ga-sort-asc" : void 0
			});
			r.addEventListener("click", () => {
				this.desc = this.sort === n ? !this.desc : n !== "node" && n !== "key" && n !== "io" && n !== "order", this.sort = n, this.reload();
			}), t.append(r);
		}
		let n = K("tbody");
		for (let e of this.rows) {
			let t = K("tr", {
				testid: "compare-row",
				class: `ga-clickable ga-row-${ze(typeof e.precision == "number" ? e.precision : null)}`
			});
			for (let n of this.columns) {
				let r = Ve(e[n]);
				n === "key" && typeof e.node == "string" && r.startsWith(e.node + ".") && (r = r.slice(e.node.length + 1)), t.append(K("td", {
					text: r,
					title: n === "key" ? Ve(e[n]) : void 0
				}));
			}
			t.addEventListener("click", () => void this.ctx.goToNode("NPU", String(e.node ?? e.name ?? ""))), n.append(t);
		}
		this.table.append(K("thead", {}, t), n);
	}
	async firstDivergence() {
		try {
			let e = (await this.ctx.api.findings(this.ctx.graphKey())).first_divergence, t = e && typeof e.name == "string" ? e.name : null;
			this.findingsBox.textContent = t ? "" : l("noDivergence"), t && await this.ctx.goToNode("NPU", t);
		} catch (e) {
			this.ctx.error(e);
		}
	}
}, Ue = .002, We = class {
	scale = 1;
	tx = 0;
	ty = 0;
	toWorld(e, t) {
		return {
			x: (e - this.tx) / this.scale,
			y: (t - this.ty) / this.scale
		};
	}
	toScreen(e, t) {
		return {
			x: e * this.scale + this.tx,
			y: t * this.scale + this.ty
		};
	}
	zoomAt(e, t, n) {
		let r = Math.max(Ue, Math.min(4, this.scale * n)), i = this.toWorld(e, t);
		this.scale = r, this.tx = e - i.x * r, this.ty = t - i.y * r;
	}
	fit(e, t, n, r, i, a, o = 16, s = 1.25) {
		let c = Math.min((i - 2 * o) / Math.max(n, 1), (a - 2 * o) / Math.max(r, 1), s);
		this.scale = Math.max(Ue, c), this.tx = (i - n * this.scale) / 2 - e * this.scale, this.ty = o - t * this.scale, r * this.scale < a - 2 * o && (this.ty = (a - r * this.scale) / 2 - t * this.scale);
	}
	centerOn(e, t, n, r) {
		this.tx = n / 2 - e * this.scale, this.ty = r / 2 - t * this.scale;
	}
};
// src/render/draw.ts
function Ge(e, t) {
	if (e.length <= t) return e;
	let n = e.replace(/^(Module|Functional|Tensor|Torch|Distributed|Aten|NPU)\./, "");
	if (n !== e) return Ge(n, t);
	if (t <= 1) return "…";
	let r = Math.ceil((t - 1) / 2), i = t - 1 - r;
	return e.slice(0, r) + "…" + (i > 0 ? e.slice(e.length - i) : "");
}
function Ke(e, t, n, r, i, a) {
	let o = a.theme;
	e.fillStyle = o.background, e.fillRect(0, 0, r, i);
	let s = n.scale, c = n.toWorld(0, 0), l = [], u = [], d = [], f = [], p = [], m = (e, t, n, r, i, a) => {
		let o = l[e] ?? (l[e] = /* @__PURE__ */ new Map()), s = o.get(t);
		s || o.set(t, s = []);
		let c = s.length - 4;
		c >= 0 && s[c + 1] === r && s[c + 3] === a && n - (s[c] + s[c + 2]) < 1.5 && n >= s[c] ? s[c + 2] = n + i - s[c] : s.push(n, r, i, a);
	}, h = 0;
	ne(t, c.x, c.y, r / s, i / s, (e, t, r) => {
		h++;
		let i = t * s + n.tx, c = r * s + n.ty, l = e.w * s, g = e.h * s, _ = a.fill(e);
		if (e.expanded && e.children && e.children.length) {
			let t = Math.min(g, 24 * s);
			m(e.depth, T(_, o.background, o.dark ? .8 : .7), i, c, l, g), m(e.depth, _, i, c, l, t), l >= 4 && g >= 4 && u.push(i, c, l, g), t >= 11 && d.push({
				n: e,
				x: i,
				y: c,
				w: l,
				h: t,
				fill: _,
				header: !0
			});
		} else {
			m(e.depth, _, i, c, Math.max(l, .6), Math.max(g, .6)), l >= 4 && g >= 4 && u.push(i, c, l, g), g >= 11 && l >= 24 && d.push({
				n: e,
				x: i,
				y: c,
				w: l,
				h: g,
				fill: _,
				header: !1
			});
			let t = a.badge(e);
			t && l >= 6 && f.push({
				x: i + l - Math.max(3, l * .06),
				y: c,
				w: Math.max(3, l * .06),
				h: g,
				c: t
			});
		}
		return e.name === a.selected ? p.push({
			x: i,
			y: c,
			w: l,
			h: g,
			c: o.selection,
			lw: 3
		}) : e.name === a.counterpart ? p.push({
			x: i,
			y: c,
			w: l,
			h: g,
			c: o.counterpart,
			lw: 3
		}) : a.highlighted.has(e.name) && p.push({
			x: i,
			y: c,
			w: l,
			h: g,
			c: o.highlight,
			lw: 2
		}), g >= 3;
	});
	for (let t of l) if (t) for (let [n, r] of t) {
		e.fillStyle = n, e.beginPath();
		for (let t = 0; t < r.length; t += 4) e.rect(r[t], r[t + 1], r[t + 2], r[t + 3]);
		e.fill();
	}
	if (u.length) {
		e.strokeStyle = o.stroke, e.lineWidth = 1, e.beginPath();
		for (let t = 0; t < u.length; t += 4) e.rect(Math.round(u[t]) + .5, Math.round(u[t + 1]) + .5, u[t + 2], u[t + 3]);
		e.stroke();
	}
	for (let t of f) e.fillStyle = t.c, e.fillRect(t.x, t.y, t.w, t.h);
	for (let t of d) {
		e.font = `${Math.min(13, Math.max(8, t.h * .5))}px system-ui, "Noto Sans CJK SC", sans-serif`, e.textBaseline = "middle", e.fillStyle = pe(t.fill);
		let n = t.w - 8 - (t.header ? 0 : Math.max(3, t.w * .06)), r = t.n.name;
		t.header && t.n.children && (r += `  (${t.n.children.length})`);
		let i = e.measureText(r).width;
		i > n && (r = Ge(r, Math.max(1, Math.floor(r.length * n / i) - 1))), e.fillText(r, t.x + 4, t.y + t.h / 2, Math.max(4, n));
	}
	for (let t of p) e.strokeStyle = t.c, e.lineWidth = t.lw, e.strokeRect(t.x - 1, t.y - 1, t.w + 2, t.h + 2);
	return {
		visited: h,
		labels: d.length
	};
}
var qe = class {
	onMove;
	canvas;
	image = null;
	scale = 1;
	worldW = 1;
	worldH = 1;
	job = 0;
	constructor(e, t) {
		this.onMove = t, this.canvas = document.createElement("canvas"), this.canvas.className = "ga-minimap", this.canvas.dataset.testid = e, this.canvas.width = 160, this.canvas.height = 110;
		let n = !1, r = (e) => {
			let t = this.canvas.getBoundingClientRect();
			this.onMove((e.clientX - t.left) / this.scale, (e.clientY - t.top) / this.scale);
		};
		this.canvas.addEventListener("pointerdown", (e) => {
			n = !0, this.canvas.setPointerCapture?.(e.pointerId), r(e), e.stopPropagation();
		}), this.canvas.addEventListener("pointermove", (e) => n && r(e)), this.canvas.addEventListener("pointerup", () => n = !1);
	}
	async rebuild(e, t, n, r) {
		let i = ++this.job;
		this.worldW = Math.max(e.w, 1), this.worldH = Math.max(e.h, 1), this.scale = Math.min(160 / this.worldW, 110 / this.worldH);
		let a = [], o = /* @__PURE__ */ new Map(), s = [], c = .25 / this.scale, l = (e, r, i) => {
			let u = e.expanded && e.children?.length ? T(t(e), n.background, n.dark ? .8 : .7) : t(e), d = o.get(u);
			if (d === void 0 && (d = a.length, a.push(u), o.set(u, d)), s.push(r, i, e.w, e.h, d, e.depth), e.expanded && e.children && e.h > c * 4) for (let t of e.children) l(t, r + t.x, i + t.y);
		};
		l(e, e.x, e.y);
		let u = await r.minimap({
			width: 160,
			height: 110,
			scale: this.scale,
			rects: new Float64Array(s),
			colors: a,
			background: n.background,
			stroke: n.stroke
		});
		i === this.job && (this.image = u ?? this.drawInline(s, a, n));
	}
	drawInline(e, t, n) {
		let r = document.createElement("canvas");
		r.width = 160, r.height = 110;
		let i = r.getContext("2d");
		if (!i) return null;
		i.fillStyle = n.background, i.fillRect(0, 0, 160, 110);
		let a = this.scale;
		for (let n = 0; n < e.length; n += 6) i.fillStyle = t[e[n + 4]], i.fillRect(e[n] * a, e[n + 1] * a, Math.max(.5, e[n + 2] * a), Math.max(.5, e[n + 3] * a));
		return r;
	}
	drawViewport(e, t, n, r) {
		let i = this.canvas.getContext("2d");
		if (!i) return;
		i.clearRect(0, 0, 160, 110), i.fillStyle = r.background, i.fillRect(0, 0, 160, 110), this.image && i.drawImage(this.image, 0, 0);
		let a = e.toWorld(0, 0), o = this.scale;
		i.strokeStyle = r.selection, i.lineWidth = 1.5, i.strokeRect(a.x * o, a.y * o, t / e.scale * o, n / e.scale * o);
	}
}, Je = 2e3, Ye = 5e4;
function Xe(e) {
	return {
		name: "",
		type: 1,
		n_children: 0,
		precision: null,
		overflow: null,
		subtree_precision: null,
		subtree_overflow: null,
		matched: !0,
		micro_step: 0,
		order: e
	};
}
var Ze = 3e3, Qe = class {
	side;
	host;
	el;
	canvas;
	minimap;
	camera = new We();
	root = null;
	byName = /* @__PURE__ */ new Map();
	pending = /* @__PURE__ */ new Map();
	dirty = !1;
	minimapDirty = !1;
	zoomTarget = null;
	generation = 0;
	width = 0;
	height = 0;
	lastDrawMs = 0;
	draws = 0;
	lastVisited = 0;
	constructor(e, t, n) {
		this.side = e, this.host = t, this.canvas = K("canvas", {
			class: "ga-canvas",
			tabindex: 0,
			"aria-label": `${e} graph`
		}), this.minimap = new qe(n, (e, t) => {
			this.camera.centerOn(e, t, this.width, this.height), this.requestDraw();
		}), this.el = K("div", {
			class: "ga-pane",
			testid: `graph-pane-${e}`
		}, K("div", {
			class: "ga-pane-title",
			text: e === "NPU" ? "NPU" : "Bench"
		}), this.canvas, this.minimap.canvas), this.bindEvents(), new ResizeObserver(() => this.resize()).observe(this.el);
	}
	resize() {
		let e = this.canvas.getBoundingClientRect(), t = window.devicePixelRatio || 1;
		this.width = e.width, this.height = e.height, this.canvas.width = Math.max(1, Math.round(e.width * t)), this.canvas.height = Math.max(1, Math.round(e.height * t)), this.requestDraw();
	}
	viewportSize() {
		if (!this.width) {
			let e = this.canvas.getBoundingClientRect();
			this.width = e.width, this.height = e.height;
		}
		return {
			w: this.width,
			h: this.height
		};
	}
	async load() {
		let e = ++this.generation;
		this.byName.clear(), this.pending.clear(), this.root = null, this.requestDraw();
		let t = this.host.key(this.side), n = await this.host.api.root(t);
		if (e !== this.generation) return;
		let r = d(n, null, 0);
		this.root = r, this.byName.set(r.name, r), await this.expandNode(r, !1);
	}
	async ensureChildren(e) {
		if (e.children) return;
		let t = this.generation, n = this.host.key(this.side), r = this.host.microStep();
		this.host.onBusy(1);
		try {
			let i = await this.host.api.children(n, e.name, r, 0, Je);
			if (t !== this.generation || e.children) return;
			let a = Math.max(i.total, i.children.length), o = i.children.slice();
			for (let e = o.length; e < a; e++) o.push(Xe(e));
			let s = await this.host.engine.grid(a);
			if (t !== this.generation || e.children) return;
			for (let t of g(e, o, s.xy)) t.name && this.byName.set(t.name, t);
			return i.children.length < a && this.pending.set(e, this.loadRest(e, i.children.length, t)), {
				w: s.w,
				h: s.h
			};
		} finally {
			this.host.onBusy(-1);
		}
	}
	async loadRest(e, t, n) {
		let r = this.host.key(this.side);
		this.host.onBusy(1);
		try {
			let i = t, a = e.children;
			for (; i < a.length && n === this.generation;) {
				let t = await this.host.api.children(r, e.name, this.host.microStep(), i, Ye);
				if (n !== this.generation || !t.children.length) break;
				t.children.forEach((e, t) => {
					let n = a[i + t];
					n && (n.summary = e, n.name = e.name, this.byName.set(e.name, n));
				}), i += t.children.length, this.repaint();
			}
		} catch (e) {
			this.host.onError(e);
		} finally {
			this.pending.delete(e), this.host.onBusy(-1);
		}
	}
	async whenLoaded(e) {
		await this.pending.get(e);
	}
	async expandNode(e, t = !0) {
		if (e.expanded || e.summary.n_children === 0) return;
		t && this.host.onToggle(this.side, e, !0);
		let n = await this.ensureChildren(e);
		e.children && !e.expanded && (_(e, n), this.layoutChanged(), this.host.onLayout(this.side));
	}
	collapseNode(e, t = !0) {
		e.expanded && (t && this.host.onToggle(this.side, e, !1), ee(e), this.layoutChanged(), this.host.onLayout(this.side));
	}
	async toggle(e) {
		e.expanded ? this.collapseNode(e) : await this.expandNode(e);
	}
	async revealPath(e) {
		if (!this.root || !e.length) return null;
		let t = this.root;
		if (e[0] !== this.root.name) return this.byName.get(e[e.length - 1]) ?? null;
		for (let n = 1; n < e.length; n++) {
			if (!t) return null;
			await this.expandNode(t, !1), await this.whenLoaded(t), t = t.children?.find((t) => t.name === e[n]);
		}
		return t ?? null;
	}
	async expandNames(e) {
		let t = new Set(e), n = !0;
		for (; n && t.size;) {
			n = !1;
			for (let e of [...t]) {
				let r = this.byName.get(e);
				r && te(r) && (t.delete(e), await this.expandNode(r, !1), await this.whenLoaded(r), n = !0);
			}
		}
	}
	async expandToDepth(e) {
		if (!this.root) return;
		let t = [this.root], n = 0;
		for (let r = 0; r < e && t.length && n < Ze; r++) {
			let e = t.filter((e) => e.summary.n_children > 0).slice(0, Ze - n);
			n += e.length;
			for (let t = 0; t < e.length; t += 8) await Promise.all(e.slice(t, t + 8).map(async (e) => {
				await this.expandNode(e, !1), await this.whenLoaded(e);
			}));
			t = e.flatMap((e) => e.children ?? []);
		}
	}
	collapseAll() {
		let e = this.root;
		if (e) {
			for (let t of this.byName.values()) t !== e && t.expanded && (t.expanded = !1, t.w = 220, t.h = 26);
			m(e, 0), this.layoutChanged();
		}
	}
	expandedNames() {
		return this.root ? b(this.root).filter((e) => e.expanded).map((e) => e.name) : [];
	}
	shownNames() {
		return this.root ? b(this.root).filter((e) => e.name).map((e) => e.name) : [];
	}
	nodeRect(e) {
		let t = this.byName.get(e);
		if (!t || !te(t)) return null;
		let n = v(t), r = this.camera.toScreen(n.x, n.y), i = t.w * this.camera.scale, a = t.h * this.camera.scale, { w: o, h: s } = this.viewportSize();
		if (r.x > o || r.y > s || r.x + i < 0 || r.y + a < 0) return null;
		let c = this.canvas.getBoundingClientRect();
		return {
			x: c.left + r.x,
			y: c.top + r.y,
			w: i,
			h: a
		};
	}
	fit() {
		if (!this.root) return;
		let { w: e, h: t } = this.viewportSize();
		this.camera.fit(this.root.x, this.root.y, this.root.w, this.root.h, e, t), this.requestDraw();
	}
	focus(e) {
		let t = v(e), { w: n, h: r } = this.viewportSize();
		e.h * this.camera.scale < 18 && (this.camera.scale = Math.min(1, 24 / e.h)), e.w * this.camera.scale > n * .9 && (this.camera.scale = Math.max(.002, n * .9 / e.w)), this.camera.centerOn(t.x + Math.min(e.w, n / this.camera.scale) / 2, t.y + Math.min(e.h, r / 3 / this.camera.scale) / 2, n, r), this.requestDraw();
	}
	layoutChanged() {
		this.minimapDirty = !0, this.requestDraw();
	}
	repaint() {
		this.layoutChanged();
	}
	requestDraw() {
		this.dirty || (this.dirty = !0, requestAnimationFrame(() => this.frame()));
	}
	frame() {
		if (this.dirty = !1, this.zoomTarget) {
			let e = this.zoomTarget, t = this.camera.scale + (e.scale - this.camera.scale) * .35, n = Math.abs(t - e.scale) / e.scale < .01;
			this.camera.zoomAt(e.sx, e.sy, (n ? e.scale : t) / this.camera.scale), n ? this.zoomTarget = null : this.requestDraw();
		}
		this.draw();
	}
	draw() {
		let e = this.canvas.getContext("2d");
		if (!e) return;
		let t = performance.now(), { w: n, h: r } = this.viewportSize(), i = window.devicePixelRatio || 1;
		e.setTransform(i, 0, 0, i, 0, 0);
		let a = this.host.theme();
		if (!this.root) {
			e.fillStyle = a.background, e.fillRect(0, 0, n, r);
			return;
		}
		let o = this.host.colouring(this.side), s = {
			fill: o.fill,
			badge: o.badge,
			theme: a,
			selected: this.host.selectedOn(this.side),
			counterpart: this.host.counterpartOn(this.side),
			highlighted: this.host.highlighted(this.side)
		}, c = Ke(e, this.root, this.camera, n, r, s);
		if (this.lastVisited = c.visited, this.draws++ === 0 && performance.mark?.(`tbprobe:first-draw-${this.side}`), this.minimapDirty) {
			this.minimapDirty = !1;
			let e = this.root;
			this.minimap.rebuild(e, o.fill, a, this.host.engine).then(() => this.minimap.drawViewport(this.camera, this.width, this.height, a));
		}
		this.minimap.drawViewport(this.camera, n, r, a), this.lastDrawMs = performance.now() - t;
	}
	local(e) {
		let t = this.canvas.getBoundingClientRect();
		return {
			x: e.clientX - t.left,
			y: e.clientY - t.top
		};
	}
	nodeAt(e) {
		if (!this.root) return null;
		let t = this.local(e), n = this.camera.toWorld(t.x, t.y), r = re(this.root, n.x, n.y);
		return r && r.name ? r : null;
	}
	bindEvents() {
		let e = this.canvas;
		e.addEventListener("wheel", (e) => {
			e.preventDefault();
			let t = this.local(e), n = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY, r = this.zoomTarget ? this.zoomTarget.scale : this.camera.scale, i = Math.max(.002, Math.min(4, r * Math.exp(-n * .0018)));
			this.zoomTarget = {
				scale: i,
				sx: t.x,
				sy: t.y
			}, this.requestDraw();
		}, { passive: !1 });
		let t = null;
		e.addEventListener("pointerdown", (n) => {
			n.button === 0 && (e.focus(), t = {
				x: n.clientX,
				y: n.clientY,
				tx: this.camera.tx,
				ty: this.camera.ty,
				moved: !1
			}, e.setPointerCapture?.(n.pointerId));
		}), e.addEventListener("pointermove", (n) => {
			if (!t) return;
			let r = n.clientX - t.x, i = n.clientY - t.y;
			!t.moved && Math.abs(r) + Math.abs(i) < 4 || (t.moved = !0, this.zoomTarget = null, this.camera.tx = t.tx + r, this.camera.ty = t.ty + i, e.style.cursor = "grabbing", this.requestDraw());
		}), e.addEventListener("pointerup", (n) => {
			let r = t;
			if (t = null, e.style.cursor = "", r && !r.moved) {
				let e = this.nodeAt(n);
				e && this.host.onSelect(this.side, e);
			}
		}), e.addEventListener("dblclick", (e) => {
			let t = this.nodeAt(e);
			t && (e.preventDefault(), this.host.onSelect(this.side, t), this.toggle(t).catch((e) => this.host.onError(e)));
		}), e.addEventListener("keydown", (e) => this.onKey(e));
	}
	onKey(e) {
		let t = this.host.selectedOn(this.side), n = t ? this.byName.get(t) : void 0, r = (e) => {
			e && e.name && (this.host.onSelect(this.side, e), this.nodeRect(e.name) || this.focus(e));
		}, i = !0;
		switch (e.key) {
			case "Enter":
			case " ":
				n && this.toggle(n).catch((e) => this.host.onError(e));
				break;
			case "ArrowRight":
				n && !n.expanded ? this.expandNode(n).catch((e) => this.host.onError(e)) : n?.children?.length && r(n.children[0]);
				break;
			case "ArrowLeft":
				n && n.expanded ? this.collapseNode(n) : r(n?.parent);
				break;
			case "ArrowDown":
				n ? n.parent?.children && r(n.parent.children[n.index + 1]) : r(this.root);
				break;
			case "ArrowUp":
				n?.parent?.children && r(n.parent.children[n.index - 1]);
				break;
			case "+":
			case "=":
				this.zoomBy(1.25);
				break;
			case "-":
				this.zoomBy(.8);
				break;
			case "f":
				this.fit();
				break;
			default: i = !1;
		}
		i && e.preventDefault();
	}
	zoomBy(e) {
		let { w: t, h: n } = this.viewportSize();
		this.camera.zoomAt(t / 2, n / 2, e), this.requestDraw();
	}
	updateSummaries(e) {
		for (let t of e) {
			let e = this.byName.get(t.name);
			e && (e.summary = t);
		}
		this.repaint();
	}
}, $e = ["NPU", "Bench"];
// src/views/table.ts
function et(e, t, n = {}) {
	let r = K("table", {
		class: "ga-table",
		testid: n.testid
	}), i = K("thead"), a = K("tbody"), o = null, s = !1, c = () => {
		q(a);
		let r = t;
		if (o !== null) {
			let n = e.find((e) => e.key === o);
			r = [...t].sort((e, t) => Re(n.value(e), n.value(t)) * (s ? -1 : 1));
		}
		for (let t of r) {
			let r = K("tr", {
				testid: n.rowTestid,
				class: n.rowClass?.(t) ?? void 0
			});
			for (let n of e) {
				let e = n.value(t);
				r.append(K("td", {
					class: n.className,
					text: e == null ? "" : String(e)
				}));
			}
			n.onRowClick && (r.classList.add("ga-clickable"), r.addEventListener("click", () => n.onRowClick(t))), a.append(r);
		}
	}, l = K("tr");
	for (let t of e) {
		let e = K("th", {
			title: t.title,
			text: t.label,
			"data-key": t.key
		});
		e.addEventListener("click", () => {
			s = o === t.key && !s, o = t.key;
			for (let e of l.children) e.classList.remove("ga-sort-asc", "ga-sort-desc");
			e.classList.add(s ? "ga-sort-desc" : "ga-sort-asc"), c();
		}), l.append(e);
	}
	return i.append(l), r.append(i, a), c(), r;
}
// src/views/details.ts
var tt = /diff|err|result|cosine|rmse|relative|consistent|euc|abs|accuracy|ratio|md5 compare/i, nt = /* @__PURE__ */ new Set(["data_name", "type"]), Z = [
	"Max",
	"Min",
	"Mean",
	"Norm"
], rt = {
	0: "module",
	1: "API",
	8: "fused collection",
	9: "API collection"
};
function it(e, t) {
	return e in t || tt.test(e);
}
function at(e, t) {
	return t.startsWith(e + ".") ? t.slice(e.length + 1) : t;
}
function ot(e, t, n, r) {
	let i = new Map(r.map((e) => [at(n ?? "", e.key), e]));
	return t.map((t, n) => {
		let a = at(e, t.key);
		return {
			param: a,
			debug: t,
			bench: i.get(a) ?? r[n] ?? null
		};
	});
}
function st(e, t, n) {
	let r = [], i = [];
	for (let n of e) for (let e of Object.keys(n.debug.fields)) {
		if (nt.has(e)) continue;
		let n = it(e, t) ? i : r;
		n.includes(e) || n.push(e);
	}
	let a = r.filter((e) => Z.includes(e)), o = r.filter((e) => !Z.includes(e)), s = [{
		key: "param",
		label: "",
		value: (e) => e.param,
		className: "ga-param"
	}], c = /* @__PURE__ */ new Set(), u = (e) => {
		s.push({
			key: `d:${e}`,
			label: n ? `${e} (${l("debug")})` : e,
			title: t[e],
			value: (t) => t.debug.fields[e]
		}), n && s.push({
			key: `b:${e}`,
			label: `${e} (${l("bench")})`,
			title: t[e],
			value: (t) => t.bench?.fields[e]
		});
	}, d = (e) => {
		c.add(e), s.push({
			key: `c:${e}`,
			label: e,
			title: t[e] ?? `${l("diff")}: ${e}`,
			value: (t) => t.debug.fields[e],
			className: "ga-diff"
		});
	};
	for (let e of a) {
		u(e);
		for (let t of i) !c.has(t) && t.startsWith(e) && d(t);
	}
	for (let e of i) c.has(e) || d(e);
	for (let e of o) u(e);
	return s;
}
var ct = class {
	ctx;
	el;
	body;
	seq = 0;
	constructor(e) {
		this.ctx = e, this.body = K("div", { class: "ga-details-body" }), this.el = K("section", {
			class: "ga-details",
			testid: "node-details"
		}, K("h3", { text: l("nodeDetails") }), this.body), this.body.append(K("p", {
			class: "ga-muted",
			text: l("noSelection")
		}));
	}
	clear() {
		this.seq++, q(this.body), this.body.append(K("p", {
			class: "ga-muted",
			text: l("noSelection")
		}));
	}
	async show(e, t) {
		let n = ++this.seq, r = this.ctx.meta(), i = r?.tool_tip ?? {}, a = e === "NPU" ? "Bench" : "NPU", o = null;
		if (t.counterpart && t.counterpart_data) o = {
			...t,
			name: t.counterpart,
			counterpart: t.name,
			...t.counterpart_data
		};
		else if (t.counterpart && r?.sides.includes(a)) try {
			o = await this.ctx.api.node(this.ctx.sideKey(a), t.counterpart);
		} catch {
			o = null;
		}
		if (n !== this.seq) return;
		q(this.body);
		let s = K("div", { class: "ga-details-head" }, K("div", {
			class: "ga-node-name",
			text: t.name
		}), K("div", {
			class: "ga-muted",
			text: `${l("type")}: ${rt[t.type] ?? t.type}` + (t.precision === null ? "" : ` · ${l("precision")}: ${t.precision}`) + (t.overflow ? ` · overflow: ${t.overflow}` : "")
		}));
		if (t.counterpart) {
			let e = K("a", {
				href: "#",
				class: "ga-link",
				text: t.counterpart
			});
			e.addEventListener("click", (e) => {
				e.preventDefault(), this.ctx.goToNode(a, t.counterpart);
			}), s.append(K("div", {}, `${l("counterpart")}: `, e));
		}
		t.dump_data_dir && s.append(K("div", {
			class: "ga-muted",
			text: `${l("dumpDir")}: ${t.dump_data_dir}`
		})), this.body.append(s);
		let c = e === "NPU" ? t : o, u = e === "NPU" ? o : t, d = [
			[
				l("inputs"),
				"inputs",
				"details-inputs"
			],
			[
				l("outputs"),
				"outputs",
				"details-outputs"
			],
			[
				l("parameters"),
				"parameters",
				"details-parameters"
			]
		];
		for (let [e, n, r] of d) {
			let a = c ?? t, o = ot(a.name, a[n] ?? [], u && u !== a ? u.name : null, u && u !== a ? u[n] ?? [] : []), s = K("div", {
				class: "ga-details-section",
				testid: r
			}, K("h4", { text: `${e} (${o.length})` }));
			if (o.length) {
				let e = !!u && u !== a;
				s.append(K("div", { class: "ga-scroll-x" }, et(st(o, i, e), o)));
			}
			this.body.append(s);
		}
		this.body.append(this.stackSection(t.stack ?? []));
		let f = this.peerLinks(e, t);
		f && this.body.append(f);
	}
	stackSection(e) {
		let t = K("button", {
			class: "ga-small",
			testid: "copy-stack",
			text: l("copy")
		});
		t.addEventListener("click", async () => {
			let n = await Ie(e.join("\n"));
			t.textContent = l(n ? "copied" : "copy"), setTimeout(() => t.textContent = l("copy"), 1500);
		});
		let n = K("pre", {
			class: "ga-stack",
			text: e.join("\n")
		});
		return K("div", {
			class: "ga-details-section",
			testid: "details-stack"
		}, K("h4", {}, `${l("stack")} (${e.length}) `, t), n);
	}
	peerLinks(e, t) {
		let n = t.distributed?.nodes_info;
		if (!n || typeof n != "object") return null;
		let r = K("div", { class: "ga-details-section" }, K("h4", { text: `${l("peers")}${t.distributed?.communications_type ? ` (${t.distributed.communications_type})` : ""}` }));
		for (let [t, i] of Object.entries(n)) {
			let n = Array.isArray(i) ? i : [i], a = String(n[n.length - 1] ?? ""), o = parseInt(t, 10);
			if (!a || Number.isNaN(o)) continue;
			let s = K("a", {
				href: "#",
				class: "ga-link",
				testid: "details-peer",
				text: `${l("rank")} ${o}: ${a}`
			});
			s.addEventListener("click", (t) => {
				t.preventDefault(), this.ctx.goToNode(e, a, o);
			}), r.append(K("div", {}, s));
		}
		return r;
	}
};
// src/views/paint.ts
function lt(e) {
	let { mode: t, side: n, meta: r, legend: i, theme: a } = e, o = r.graph_type === "compare", s = ue(i), c = C(i) ?? "#C7C7C7", l = a.neutral, u = (e, t) => n === "Bench" ? t || !o ? l : c : !o || e === null && t ? l : s(e, !0) ?? l;
	return {
		fill: (r) => {
			if (!r.name) return l;
			let i = r.summary;
			return t === "overflow" ? i.overflow ? x[i.overflow] : l : t === "metric" ? n === "Bench" || !e.metric || !e.scale ? l : e.scale.color(e.metric.get(r.name)) ?? l : i.overflow && !o ? x[i.overflow] : u(i.precision, i.matched);
		},
		badge: (r) => {
			if (!e.worstInside || r.expanded || r.summary.n_children === 0) return null;
			let i = r.summary;
			if (t === "overflow" || !o && t === "legend") {
				let e = i.subtree_overflow;
				return e && (!i.overflow || S[e] > S[i.overflow]) ? x[e] : null;
			}
			if (t === "legend" && n === "NPU" && o) {
				let e = i.subtree_precision;
				if (e !== null && e > (i.precision ?? -1)) return s(e, !0);
			}
			return null;
		}
	};
}
// src/views/legendPanel.ts
function ut(e, t, n) {
	let r = {};
	for (let [i, a] of Object.entries(e)) r[i === t ? n : i] = a;
	return r;
}
var dt = class {
	ctx;
	graph;
	el;
	list;
	constructor(e, t) {
		this.ctx = e, this.graph = t, this.list = K("div", { class: "ga-legend-list" }), this.el = K("section", {
			class: "ga-legend",
			testid: "legend"
		}, K("h3", { text: l("legend") }), K("p", {
			class: "ga-muted",
			text: l("legendHelp")
		}), this.list), e.store.subscribe((e, t) => {
			t.has("colorMode") && this.render();
		});
	}
	render() {
		if (q(this.list), this.ctx.store.state.colorMode === "overflow") {
			for (let [e, t] of Object.entries(x)) this.list.append(K("div", {
				class: "ga-legend-item",
				testid: "legend-item"
			}, K("span", {
				class: "ga-swatch",
				style: `background:${t}`
			}), K("span", { text: l(e) })));
			return;
		}
		if (this.ctx.store.state.colorMode === "metric") {
			let e = this.graph.metricScale();
			if (e && Number.isFinite(e.scale.min)) {
				let t = E.map((e, t) => `${e} ${Math.round(t / (E.length - 1) * 100)}%`).join(",");
				this.list.append(K("div", {
					class: "ga-legend-item",
					testid: "legend-item"
				}, K("span", { text: e.metric })), K("div", {
					class: "ga-gradient",
					style: `background:linear-gradient(to right,${t})`
				}), K("div", { class: "ga-row ga-muted" }, K("span", { text: X(e.scale.min) }), K("span", { class: "ga-spacer" }), K("span", { text: `${X(e.scale.max)} (log)` })));
			}
			return;
		}
		let e = this.ctx.legend();
		for (let [t, n] of Object.entries(e)) {
			let e = K("input", {
				type: "color",
				value: t.length === 7 ? t : "#cccccc",
				title: t
			});
			e.addEventListener("change", () => void this.change(t, e.value.toUpperCase()));
			let r = n.value && n.value.length === 2 ? `[${n.value[0]}, ${n.value[1]}]` : "", i = n.accuracy_level ?? "", a = i.split(" ")[0], o = a === "pass" || a === "warning" || a === "error" || a === "unmatched" ? l(a) : i;
			this.list.append(K("div", {
				class: "ga-legend-item",
				testid: "legend-item",
				title: n.description ?? ""
			}, e, K("span", {
				class: "ga-legend-label",
				text: `${o} ${r}`
			})));
		}
	}
	async change(e, t) {
		if (e === t) return;
		let n = ut(this.ctx.legend(), e, t);
		this.ctx.setLegend(n), this.render(), this.graph.redraw();
		try {
			let e = this.ctx.graphKey();
			await this.ctx.api.saveLegend({
				run: e.run,
				file: e.file
			}, n);
		} catch (e) {
			this.ctx.error(e);
		}
	}
};
// src/views/matchPanel.ts
function ft(e, t, n) {
	return `${e.replace(/\.vis(\.db)?$/, "")}_${t}_${n}.vis.config`;
}
var pt = class {
	ctx;
	graph;
	el;
	last = {
		NPU: null,
		Bench: null
	};
	pair;
	count;
	descendants;
	matchBtn;
	unmatchBtn;
	constructor(e, t) {
		this.ctx = e, this.graph = t, this.pair = K("div", { class: "ga-pair ga-muted" }), this.count = K("div", { class: "ga-muted" }), this.descendants = K("input", {
			type: "checkbox",
			testid: "match-descendants"
		}), this.matchBtn = K("button", {
			testid: "match-button",
			text: l("matchButton")
		}), this.unmatchBtn = K("button", {
			testid: "unmatch-button",
			text: l("unmatchButton")
		}), this.matchBtn.addEventListener("click", () => void this.doMatch()), this.unmatchBtn.addEventListener("click", () => void this.doUnmatch());
		let n = K("input", {
			type: "file",
			accept: ".config,.json,application/json",
			hidden: !0
		});
		n.addEventListener("change", () => void this.loadConfig(n));
		let r = K("button", {
			class: "ga-small",
			text: l("loadConfig")
		});
		r.addEventListener("click", () => n.click());
		let i = K("button", {
			class: "ga-small",
			text: l("saveConfig")
		});
		i.addEventListener("click", () => void this.saveConfig());
		let a = K("button", {
			class: "ga-small",
			text: l("applyEdits")
		});
		a.addEventListener("click", () => void this.apply()), this.el = K("section", { class: "ga-match" }, K("h3", { text: l("match") }), K("p", {
			class: "ga-muted",
			text: l("matchHelp")
		}), this.pair, K("div", { class: "ga-row" }, this.matchBtn, this.unmatchBtn, K("label", { class: "ga-inline" }, this.descendants, ` ${l("descendants")}`)), K("div", { class: "ga-row" }, r, i, n), this.count, K("div", { class: "ga-row" }, a)), e.store.subscribe((e, t) => {
			t.has("selected") && e.selected && (this.last[e.selected.side] = e.selected.name, this.renderPair());
		});
	}
	renderPair() {
		this.pair.textContent = `${l("debug")}: ${this.last.NPU ?? "—"}   ·   ${l("bench")}: ${this.last.Bench ?? "—"}`;
		let e = (this.ctx.meta()?.sides.length ?? 1) > 1;
		this.matchBtn.disabled = !e || !this.last.NPU || !this.last.Bench, this.unmatchBtn.disabled = !e || !this.last.NPU;
	}
	async load() {
		let e = (this.ctx.meta()?.sides.length ?? 1) > 1;
		this.el.hidden = !e, this.last = {
			NPU: null,
			Bench: null
		};
		let t = this.ctx.store.state.selected;
		if (t && (this.last[t.side] = t.name), this.renderPair(), e) try {
			let e = await this.ctx.api.matches(this.ctx.graphKey());
			this.count.textContent = `${Object.keys(e.matches ?? {}).length} ${l("matchesCount")}`;
		} catch {
			this.count.textContent = "";
		}
	}
	async doMatch() {
		if (this.last.NPU && this.last.Bench) try {
			let e = await this.ctx.api.match(this.ctx.graphKey(), this.last.NPU, this.last.Bench, this.descendants.checked);
			await this.graph.applyChanged(e.changed ?? []), await this.load();
		} catch (e) {
			this.ctx.error(e);
		}
	}
	async doUnmatch() {
		if (this.last.NPU) try {
			let e = await this.ctx.api.unmatch(this.ctx.graphKey(), this.last.NPU, this.descendants.checked);
			await this.graph.applyChanged(e.changed ?? []), await this.load();
		} catch (e) {
			this.ctx.error(e);
		}
	}
	async loadConfig(e) {
		let t = e.files?.[0];
		if (e.value = "", t) try {
			let e = JSON.parse(await t.text());
			if (!e || typeof e != "object" || Array.isArray(e)) throw Error(`${t.name}: not a {debug: bench} object`);
			for (let [t, n] of Object.entries(e)) typeof n == "string" && await this.ctx.api.match(this.ctx.graphKey(), t, n, !1);
			await this.graph.reloadKeepingView();
		} catch (e) {
			this.ctx.error(e);
		}
	}
	async saveConfig() {
		try {
			let e = this.ctx.graphKey(), t = await this.ctx.api.matches(e);
			Le(t.file ?? ft(e.file, e.step, e.rank), JSON.stringify(t.matches ?? {}, null, 2));
		} catch (e) {
			this.ctx.error(e);
		}
	}
	async apply() {
		if (window.confirm(l("applyConfirm"))) try {
			let e = this.ctx.graphKey();
			await this.ctx.api.apply({
				run: e.run,
				file: e.file
			}), await this.graph.reloadKeepingView();
		} catch (e) {
			this.ctx.error(e);
		}
	}
}, mt = 100, ht = [
	"pass",
	"warning",
	"error",
	"unmatched"
], gt = [
	"medium",
	"high",
	"critical"
], _t = class {
	ctx;
	graph;
	el;
	match;
	legend;
	searchInput;
	regexBox;
	searchSide;
	searchCount;
	searchWord;
	searchList;
	filterSide;
	filterBoxes = /* @__PURE__ */ new Map();
	sortSelect;
	descBox;
	filterCount;
	filterList;
	searchTimer = null;
	searchSeq = 0;
	filterSeq = 0;
	constructor(e, t) {
		this.ctx = e, this.graph = t;
		let n = e.store.state;
		this.searchInput = K("input", {
			type: "search",
			testid: "search-input",
			placeholder: l("searchPlaceholder")
		}), this.searchInput.value = n.search, this.regexBox = K("input", {
			type: "checkbox",
			testid: "search-regex"
		}), this.regexBox.checked = n.regex, this.searchSide = K("select", { class: "ga-side-select" }), this.searchCount = K("span", {
			testid: "search-count",
			text: ""
		}), this.searchWord = K("span", {
			class: "ga-muted",
			text: ""
		}), this.searchList = K("ul", { class: "ga-list" });
		let r = () => {
			this.searchTimer && clearTimeout(this.searchTimer), this.searchTimer = setTimeout(() => {
				e.store.set({
					search: this.searchInput.value,
					regex: this.regexBox.checked
				}), this.runSearch();
			}, 200);
		};
		this.searchInput.addEventListener("input", r), this.searchInput.addEventListener("keydown", (e) => {
			e.key === "Enter" && this.searchList.querySelector("[data-testid=search-result]")?.click();
		}), this.regexBox.addEventListener("change", r), this.searchSide.addEventListener("change", () => void this.runSearch()), this.filterSide = K("select", { class: "ga-side-select" });
		let i = K("div", {
			class: "ga-checks",
			testid: "precision-filter"
		});
		for (let e of ht) i.append(this.check(e, n.precisionFilter.includes(e), "precision"));
		let a = K("div", {
			class: "ga-checks",
			testid: "overflow-filter"
		});
		for (let e of gt) a.append(this.check(e, n.overflowFilter.includes(e), "overflow"));
		this.sortSelect = K("select", { title: l("sortBy") }, J("order", l("order")), J("precision", l("precision")), J("name", l("name"))), this.descBox = K("input", { type: "checkbox" }), this.sortSelect.addEventListener("change", () => void this.runFilter()), this.descBox.addEventListener("change", () => void this.runFilter()), this.filterSide.addEventListener("change", () => void this.runFilter()), this.filterCount = K("span", {
			class: "ga-count",
			testid: "filter-count"
		}), this.filterList = K("ul", { class: "ga-list" }), this.match = new pt(e, t), this.legend = new dt(e, t), this.el = K("aside", { class: "ga-side" }, K("section", {}, K("h3", { text: l("search") }), K("div", { class: "ga-row" }, this.searchInput, this.searchSide), K("div", { class: "ga-row" }, K("label", { class: "ga-inline" }, this.regexBox, ` ${l("regex")}`), K("span", { class: "ga-count" }, this.searchCount, " ", this.searchWord)), this.searchList), K("section", {}, K("h3", { text: l("precisionFilter") }), i, K("h3", { text: l("overflowFilter") }), a, K("div", { class: "ga-row" }, K("label", { class: "ga-inline" }, `${l("sortBy")}: `, this.sortSelect), K("label", { class: "ga-inline" }, this.descBox, ` ${l("descending")}`), this.filterSide), this.filterCount, this.filterList), this.match.el, this.legend.el);
	}
	check(e, t, n) {
		let r = K("input", {
			type: "checkbox",
			value: e,
			"data-group": n
		});
		return r.checked = t, this.filterBoxes.set(`${n}:${e}`, r), r.addEventListener("change", () => {
			let e = (e, t) => t.filter((t) => this.filterBoxes.get(`${e}:${t}`)?.checked);
			this.ctx.store.set({
				precisionFilter: e("precision", ht),
				overflowFilter: e("overflow", gt)
			}), this.runFilter();
		}), K("label", { class: "ga-inline" }, r, ` ${l(e)}`);
	}
	load() {
		let e = this.ctx.meta()?.sides ?? ["NPU"];
		for (let t of [this.searchSide, this.filterSide]) {
			let n = t.value;
			q(t);
			for (let n of e) t.append(J(n, l(n === "NPU" ? "debugSide" : "benchSide")));
			t.value = e.includes(n) ? n : "NPU", t.hidden = e.length < 2;
		}
		this.runSearch(), this.runFilter(), this.match.load(), this.legend.render();
	}
	async runSearch() {
		let e = ++this.searchSeq, t = this.searchInput.value, n = this.searchSide.value || "NPU";
		if (q(this.searchList), !t) this.searchCount.textContent = "", this.searchWord.textContent = "", this.graph.setHighlights(n, []);
		else try {
			let r = await this.ctx.api.search(this.ctx.sideKey(n), t, this.regexBox.checked, 0, mt);
			if (e !== this.searchSeq) return;
			this.searchCount.textContent = String(r.total), this.searchWord.textContent = l("results"), this.renderItems(this.searchList, "search-result", n, r.items, r.total), this.graph.setHighlights(n, r.items.map((e) => e.name));
		} catch (t) {
			if (e !== this.searchSeq) return;
			this.searchCount.textContent = "0", this.searchWord.textContent = l("results"), this.ctx.error(t);
		}
	}
	async runFilter() {
		let e = ++this.filterSeq, t = this.ctx.store.state, n = this.filterSide.value || "NPU";
		if (q(this.filterList), this.filterCount.textContent = "", t.precisionFilter.length || t.overflowFilter.length) try {
			let r = await this.ctx.api.filter(this.ctx.sideKey(n), {
				precision: t.precisionFilter.length ? t.precisionFilter : void 0,
				overflow: t.overflowFilter.length ? t.overflowFilter : void 0,
				sort: this.sortSelect.value,
				desc: this.descBox.checked,
				limit: mt
			});
			if (e !== this.filterSeq) return;
			this.filterCount.textContent = `${r.total} ${l("results")}`, this.renderItems(this.filterList, "filter-result", n, r.items, r.total);
			let i = /* @__PURE__ */ new Set();
			for (let e of r.items) for (let t of Object.keys(e.metrics ?? {})) i.add(t);
			for (let e of i) Q(e) && ![...this.sortSelect.options].some((t) => t.value === e) && this.sortSelect.append(J(e, e));
		} catch (t) {
			e === this.filterSeq && this.ctx.error(t);
		}
	}
	renderItems(e, t, n, r, i) {
		for (let i of r) {
			let r = K("li", {
				testid: t,
				class: "ga-clickable",
				title: i.name
			}, K("span", { class: `ga-dot ga-p-${ze(i.precision)}` }), K("span", {
				class: "ga-item-name",
				text: i.name
			})), a = Object.entries(i.metrics ?? {}).filter(([e]) => Q(e));
			a.length && r.append(K("span", {
				class: "ga-metrics ga-muted",
				text: a.slice(0, 3).map(([e, t]) => `${e}=${X(t)}`).join("  ")
			})), i.overflow && r.append(K("span", {
				class: `ga-badge ga-o-${i.overflow}`,
				text: i.overflow
			})), r.addEventListener("click", () => void this.ctx.goToNode(n, i.name)), e.append(r);
		}
		i > r.length && e.append(K("li", {
			class: "ga-muted",
			text: `… ${i - r.length}`
		}));
	}
};
// src/views/graphView.ts
function Q(e) {
	return e !== "data_name" && e !== "requires_grad";
}
var vt = class {
	ctx;
	el;
	panes = /* @__PURE__ */ new Map();
	details;
	side;
	panesBox;
	breadcrumbs;
	metricSelect;
	colorSelect;
	worstBox;
	counterpart = null;
	highlights = {
		NPU: /* @__PURE__ */ new Set(),
		Bench: /* @__PURE__ */ new Set()
	};
	metricValues = null;
	metricScaleValue = null;
	colourings = /* @__PURE__ */ new Map();
	selectSeq = 0;
	host;
	constructor(e) {
		this.ctx = e, this.host = this.makeHost(), this.details = new ct(e), this.side = new _t(e, this), this.breadcrumbs = K("nav", {
			class: "ga-breadcrumbs",
			testid: "breadcrumbs"
		}), this.panesBox = K("div", { class: "ga-panes" });
		let t = K("button", {
			testid: "fit-button",
			title: l("fitTitle"),
			text: l("fit")
		});
		t.addEventListener("click", () => this.fitAll());
		let n = K("select", {
			testid: "expand-depth",
			title: l("expandDepth")
		}, J("", `${l("expandDepth")}…`), ...[
			1,
			2,
			3,
			4,
			5,
			6
		].map((e) => J(String(e), String(e))));
		n.addEventListener("change", () => {
			let e = parseInt(n.value, 10);
			n.value = "", e > 0 && this.expandToDepth(e);
		});
		let r = K("button", {
			testid: "collapse-all",
			text: l("collapseAll")
		});
		r.addEventListener("click", () => this.collapseAll()), this.colorSelect = K("select", {
			testid: "color-mode-select",
			title: l("colorBy")
		}, J("legend", l("colorLegend")), J("overflow", l("colorOverflow")), J("metric", l("colorMetric"))), this.colorSelect.value = e.store.state.colorMode, this.colorSelect.addEventListener("change", () => e.store.set({ colorMode: this.colorSelect.value })), this.metricSelect = K("select", {
			class: "ga-metric-select",
			title: l("metric")
		}), this.metricSelect.addEventListener("change", () => e.store.set({ metric: this.metricSelect.value })), this.worstBox = K("input", { type: "checkbox" }), this.worstBox.checked = e.store.state.worstInside, this.worstBox.addEventListener("change", () => e.store.set({ worstInside: this.worstBox.checked }));
		let i = K("div", { class: "ga-graph-main" }, K("div", { class: "ga-toolbar" }, t, n, r, K("label", { class: "ga-inline" }, `${l("colorBy")}: `, this.colorSelect), this.metricSelect, K("label", {
			class: "ga-inline",
			title: l("worstInside")
		}, this.worstBox, ` ${l("worstInside")}`)), this.breadcrumbs, this.panesBox, this.details.el);
		this.el = K("div", { class: "ga-graph-view" }, i, this.side.el), e.store.subscribe((e, t) => {
			(t.has("colorMode") || t.has("metric") || t.has("worstInside")) && (this.colorSelect.value = e.colorMode, this.worstBox.checked = e.worstInside, this.refreshColours());
		});
	}
	makeHost() {
		let e = this.ctx;
		return {
			api: e.api,
			engine: e.engine,
			key: (t) => e.sideKey(t),
			microStep: () => e.store.state.microStep,
			theme: () => e.theme(),
			colouring: (e) => this.colouring(e),
			selectedOn: (t) => e.store.state.selected?.side === t ? e.store.state.selected.name : null,
			counterpartOn: (e) => this.counterpart?.side === e ? this.counterpart.name : null,
			highlighted: (e) => this.highlights[e],
			onSelect: (e, t) => void this.select(e, t.name),
			onToggle: (e, t, n) => void this.syncToggle(e, t, n),
			onLayout: () => this.saveExpansionSoon(),
			onBusy: (t) => e.busy(t),
			onError: (t) => e.error(t)
		};
	}
	colouring(e) {
		let t = this.colourings.get(e);
		if (!t) {
			let n = this.ctx.meta(), r = this.ctx.store.state;
			t = lt({
				mode: r.colorMode,
				side: e,
				meta: n,
				legend: this.ctx.legend(),
				theme: this.ctx.theme(),
				worstInside: r.worstInside,
				metric: this.metricValues,
				scale: this.metricScaleValue
			}), this.colourings.set(e, t);
		}
		return t;
	}
	async refreshColours() {
		let e = this.ctx.store.state;
		this.metricSelect.hidden = e.colorMode !== "metric", e.colorMode === "metric" && await this.loadMetric(), this.colourings.clear();
		for (let e of this.panes.values()) e.repaint();
		this.side.legend.render();
	}
	metricScale() {
		return this.ctx.store.state.colorMode !== "metric" || !this.metricScaleValue ? null : {
			metric: this.metricSelect.value,
			scale: this.metricScaleValue
		};
	}
	async loadMetric() {
		let e = this.ctx.store.state;
		try {
			let t = await this.ctx.api.filter(this.ctx.sideKey("NPU"), { limit: 50 }), n = /* @__PURE__ */ new Set();
			for (let e of Object.keys(this.ctx.meta()?.tool_tip ?? {})) n.add(e);
			for (let e of t.items) for (let t of Object.keys(e.metrics ?? {})) n.add(t);
			let r = [...n].filter(Q);
			q(this.metricSelect);
			for (let e of r) this.metricSelect.append(J(e, e));
			let i = e.metric && r.includes(e.metric) ? e.metric : r[0] ?? "";
			if (this.metricSelect.value = i, !i) {
				this.metricValues = null, this.metricScaleValue = null;
				return;
			}
			let a = await this.ctx.api.allFiltered(this.ctx.sideKey("NPU")), o = /* @__PURE__ */ new Map();
			for (let e of a.items) {
				let t = e.metrics?.[i];
				typeof t == "number" && !Number.isNaN(t) && o.set(e.name, Math.abs(t));
			}
			this.metricValues = o, this.metricScaleValue = fe(o.values());
		} catch (e) {
			this.ctx.error(e);
		}
	}
	async load() {
		let e = this.ctx.meta();
		if (!e) return;
		this.colourings.clear(), this.counterpart = null, this.highlights = {
			NPU: /* @__PURE__ */ new Set(),
			Bench: /* @__PURE__ */ new Set()
		}, q(this.panesBox), this.panes.clear();
		for (let t of e.sides) {
			let e = new Qe(t, this.host, t === "NPU" ? "minimap" : `minimap-${t}`);
			this.panes.set(t, e), this.panesBox.append(e.el);
		}
		this.panesBox.classList.toggle("ga-two", e.sides.length > 1);
		let t = this.ctx.store.state;
		this.metricSelect.hidden = t.colorMode !== "metric", t.colorMode === "metric" && await this.loadMetric(), await Promise.all([...this.panes.values()].map((e) => e.load())), await Promise.all([...this.panes.values()].map((e) => e.expandNames(t.expanded[e.side])));
		for (let e of this.panes.values()) e.fit();
		t.selected && this.panes.has(t.selected.side) ? await this.select(t.selected.side, t.selected.name, { reveal: !0 }) : (this.details.clear(), this.renderBreadcrumbs(null, null)), this.side.load();
	}
	saveTimer = null;
	saveExpansionSoon() {
		this.saveTimer ||= setTimeout(() => {
			this.saveTimer = null, this.saveExpansion();
		}, 50);
	}
	saveExpansion() {
		let e = {
			NPU: [],
			Bench: []
		};
		for (let t of this.panes.values()) e[t.side] = t.expandedNames();
		this.ctx.store.set({ expanded: e });
	}
	async syncToggle(e, t, n) {
		let r = this.panes.get(e === "NPU" ? "Bench" : "NPU");
		if (r && t.summary.matched) try {
			let i = (await this.ctx.api.node(this.ctx.sideKey(e), t.name)).matched_node_link ?? [];
			if (!i.length) return;
			let a = r.byName.get(i[i.length - 1]);
			if (n) {
				let e = await r.revealPath(i);
				e && await r.expandNode(e, !1);
			} else a && r.collapseNode(a, !1);
			this.saveExpansion();
		} catch (e) {
			this.ctx.error(e);
		}
	}
	async select(e, t, n = {}) {
		let r = ++this.selectSeq;
		this.ctx.store.set({ selected: {
			side: e,
			name: t
		} });
		for (let e of this.panes.values()) e.requestDraw();
		let i;
		try {
			i = await this.ctx.api.node(this.ctx.sideKey(e), t);
		} catch (e) {
			this.ctx.error(e);
			return;
		}
		if (r !== this.selectSeq) return;
		let a = this.panes.get(e);
		if (a && (n.reveal || n.focus)) {
			let e = await a.revealPath(i.path);
			this.saveExpansion(), e && (n.focus || !a.nodeRect(e.name)) && a.focus(e);
		}
		this.renderBreadcrumbs(e, i);
		let o = e === "NPU" ? "Bench" : "NPU", s = this.panes.get(o);
		if (this.counterpart = null, s && i.counterpart) {
			this.counterpart = {
				side: o,
				name: i.counterpart
			};
			let e = i.matched_node_link ?? [], t = e.length ? await s.revealPath(e) : s.byName.get(i.counterpart) ?? null;
			if (r !== this.selectSeq) return;
			this.saveExpansion(), t && !s.nodeRect(t.name) && s.focus(t);
		}
		for (let e of this.panes.values()) e.requestDraw();
		await this.details.show(e, i);
	}
	renderBreadcrumbs(e, t) {
		q(this.breadcrumbs), this.breadcrumbs.append(K("span", {
			class: "ga-muted",
			text: `${l("breadcrumbsRoot")}: `
		})), e && t && t.path.forEach((t, n) => {
			n && this.breadcrumbs.append(K("span", {
				class: "ga-sep",
				text: " › "
			}));
			let r = K("a", {
				href: "#",
				class: "ga-crumb",
				text: t
			});
			r.addEventListener("click", (n) => {
				n.preventDefault(), this.select(e, t, { focus: !0 });
			}), this.breadcrumbs.append(r);
		});
	}
	setHighlights(e, t) {
		this.highlights[e] = new Set(t), this.panes.get(e)?.requestDraw();
	}
	fitAll() {
		for (let e of this.panes.values()) e.fit();
	}
	async expandToDepth(e) {
		await Promise.all([...this.panes.values()].map((t) => t.expandToDepth(e))), this.saveExpansion(), this.fitAll();
	}
	collapseAll() {
		for (let e of this.panes.values()) e.collapseAll();
		this.saveExpansion(), this.fitAll();
	}
	async applyChanged(e) {
		if (this.ctx.api.clearCache(), e.some((e) => !e.side)) {
			await this.load();
			return;
		}
		for (let t of $e) this.panes.get(t)?.updateSummaries(e.filter((e) => e.side === t));
		let t = this.ctx.store.state.selected;
		t && await this.select(t.side, t.name);
	}
	async reloadKeepingView() {
		this.ctx.api.clearCache(), await this.load();
	}
	redraw() {
		this.colourings.clear();
		for (let e of this.panes.values()) e.repaint();
	}
}, yt = class {
	ctx;
	el;
	list;
	seq = 0;
	constructor(e) {
		this.ctx = e, this.list = K("div", {
			class: "ga-overflow-list",
			testid: "overflow-list"
		}), this.el = K("div", { class: "ga-overflow-view" }, K("h3", { text: l("overflowList") }), this.list);
	}
	async reload() {
		let e = ++this.seq, t = this.ctx.meta();
		if (!t) return;
		let n = this.ctx.graphKey(), r = t.ranks.length ? t.ranks : [n.rank], i = await Promise.all(r.map((e) => this.ctx.api.overflow({
			...n,
			rank: e
		}).catch((e) => (this.ctx.error(e), { items: [] }))));
		e === this.seq && (q(this.list), r.forEach((e, t) => {
			let n = i[t].items, r = K("section", { class: "ga-overflow-rank" }, K("h4", { text: `${l("rank")} ${e} (${n.length})` }));
			n.length || r.append(K("p", {
				class: "ga-muted",
				text: l("noOverflow")
			}));
			let a = K("ol", { class: "ga-list" });
			n.forEach((t, n) => {
				let r = t.first ?? n === 0, i = K("li", {
					testid: "overflow-item",
					class: `ga-clickable${r ? " ga-first" : ""}`,
					title: l("goToGraph")
				}, K("span", {
					class: `ga-badge ga-o-${t.overflow}`,
					text: l(t.overflow)
				}), K("span", {
					class: "ga-item-name",
					text: t.name
				}), r ? K("span", {
					class: "ga-first-tag",
					text: l("first")
				}) : null);
				i.addEventListener("click", () => void this.ctx.goToNode("NPU", t.name, e)), a.append(i);
			}), r.append(a), this.list.append(r);
		}));
	}
}, bt = "\n.ga-root { --bg:#fff; --fg:#202124; --muted:#5f6368; --line:#dadce0; --panel:#f8f9fa; --accent:#1a73e8;\n  --hover:#e8f0fe; --first:#fce8e6;\n  position:fixed; inset:0; display:flex; flex-direction:column; background:var(--bg); color:var(--fg);\n  font:13px system-ui, \"Noto Sans CJK SC\", \"Microsoft YaHei\", sans-serif; }\n.ga-root.ga-dark { --bg:#202124; --fg:#e8eaed; --muted:#9aa0a6; --line:#3c4043; --panel:#292a2d; --accent:#8ab4f8;\n  --hover:#35363a; --first:#5c2b29; color-scheme: dark; }\n.ga-root button, .ga-root select, .ga-root input, .ga-button { font:inherit; color:var(--fg); background:var(--panel);\n  border:1px solid var(--line); border-radius:4px; padding:3px 8px; }\n.ga-root button:hover, .ga-button:hover { background:var(--hover); cursor:pointer; }\n.ga-root button:disabled { opacity:.5; cursor:default; }\n.ga-button { text-decoration:none; display:inline-block; }\n.ga-topbar { display:flex; flex-wrap:wrap; gap:8px; align-items:center; padding:6px 10px; border-bottom:1px solid var(--line); }\n.ga-tabs { display:flex; gap:2px; margin-left:8px; }\n.ga-tabs button.ga-active { background:var(--accent); color:var(--bg); border-color:var(--accent); }\n.ga-spacer { flex:1; }\n.ga-body { flex:1; min-height:0; display:flex; position:relative; }\n.ga-body > * { flex:1; min-width:0; }\n.ga-graph-view { display:flex; min-height:0; }\n.ga-graph-main { flex:1; min-width:0; display:flex; flex-direction:column; }\n.ga-toolbar { display:flex; flex-wrap:wrap; gap:6px; align-items:center; padding:6px 10px; }\n.ga-breadcrumbs { padding:2px 10px 6px; white-space:nowrap; overflow-x:auto; }\n.ga-crumb { color:var(--accent); text-decoration:none; }\n.ga-panes { flex:1; min-height:120px; display:flex; gap:4px; padding:0 6px; }\n.ga-pane { flex:1; min-width:0; position:relative; border:1px solid var(--line); border-radius:4px; overflow:hidden; }\n.ga-pane-title { position:absolute; left:8px; top:4px; font-weight:600; color:var(--muted); pointer-events:none; z-index:1; }\n.ga-canvas { width:100%; height:100%; display:block; outline:none; cursor:default; touch-action:none; }\n.ga-minimap { position:absolute; right:6px; bottom:6px; width:160px; height:110px; border:1px solid var(--line);\n  border-radius:3px; cursor:crosshair; opacity:.92; box-shadow:0 1px 4px rgba(0,0,0,.2); }\n.ga-details { height:32%; min-height:90px; overflow:auto; border-top:1px solid var(--line); padding:4px 10px; }\n.ga-details h3, .ga-side h3 { font-size:13px; margin:6px 0 4px; }\n.ga-details h4 { font-size:12px; margin:8px 0 4px; color:var(--muted); }\n.ga-node-name { font-weight:600; word-break:break-all; }\n.ga-side { flex:0 0 320px; overflow:auto; border-left:1px solid var(--line); padding:0 10px 10px; background:var(--panel); }\n.ga-side section { border-bottom:1px solid var(--line); padding-bottom:6px; }\n.ga-row { display:flex; flex-wrap:wrap; gap:6px; align-items:center; margin:4px 0; }\n.ga-row input[type=search] { flex:1; min-width:120px; }\n.ga-inline { display:inline-flex; align-items:center; gap:2px; margin-right:6px; white-space:nowrap; }\n.ga-checks { display:flex; flex-wrap:wrap; }\n.ga-list { list-style:none; margin:4px 0; padding:0; max-height:220px; overflow:auto; }\n.ga-list li { padding:2px 4px; display:flex; gap:6px; align-items:center; border-radius:3px; }\n.ga-list li > .ga-item-name { overflow:hidden; text-overflow:ellipsis; white-space:nowrap; flex:1; min-width:0; }\n.ga-clickable { cursor:pointer; }\n.ga-clickable:hover { background:var(--hover); }\n.ga-muted { color:var(--muted); }\n.ga-count { color:var(--muted); margin-left:auto; }\n.ga-dot { width:9px; height:9px; border-radius:50%; flex:0 0 auto; border:1px solid var(--line); }\n.ga-p-pass { background:#FFFCF3; } .ga-p-warning { background:#FFDC7F; } .ga-p-error { background:#FF704D; }\n.ga-p-none { background:#C7C7C7; }\n.ga-badge { font-size:11px; padding:0 5px; border-radius:8px; color:#202124; }\n.ga-o-medium { background:#B6C7FC; } .ga-o-high { background:#7E96F0; } .ga-o-critical { background:#4668B8; color:#fff; }\n.ga-metrics { font-size:11px; white-space:nowrap; }\n.ga-legend-item { display:flex; align-items:center; gap:6px; margin:3px 0; }\n.ga-legend-item input[type=color] { width:32px; height:20px; padding:0; }\n.ga-gradient { height:12px; border-radius:3px; border:1px solid var(--line); }\n.ga-swatch { width:28px; height:16px; border-radius:3px; border:1px solid var(--line); }\n.ga-table { border-collapse:collapse; font-size:12px; }\n.ga-table th, .ga-table td { border:1px solid var(--line); padding:2px 6px; text-align:left; white-space:nowrap; }\n.ga-table th { background:var(--panel); cursor:pointer; position:sticky; top:0; }\n.ga-table th.ga-sort-asc::after { content:\" ▲\"; } .ga-table th.ga-sort-desc::after { content:\" ▼\"; }\n.ga-table td.ga-diff { font-weight:600; }\n.ga-row-error td:first-child { box-shadow: inset 4px 0 #FF704D; }\n.ga-row-warning td:first-child { box-shadow: inset 4px 0 #FFDC7F; }\n.ga-scroll-x { overflow-x:auto; }\n.ga-scroll { overflow:auto; flex:1; min-height:0; padding:0 10px 10px; }\n.ga-compare-view, .ga-overflow-view { display:flex; flex-direction:column; min-height:0; }\n.ga-overflow-view { overflow:auto; padding:0 10px 10px; }\n.ga-overflow-view .ga-list { max-height:none; }\n.ga-first { background:var(--first); font-weight:600; }\n.ga-first-tag { font-size:11px; color:var(--muted); }\n.ga-stack { font-size:11px; background:var(--panel); padding:6px; max-height:180px; overflow:auto; white-space:pre-wrap; word-break:break-all; }\n.ga-small { font-size:12px !important; padding:1px 6px !important; }\n.ga-link { color:var(--accent); }\n.ga-error { background:#fce8e6; color:#a50e0e; padding:6px 10px; border-bottom:1px solid #f5c6c2; display:flex; gap:8px; }\n.ga-dark .ga-error { background:#5c2b29; color:#f6aea9; border-color:#8c3b36; }\n.ga-error[hidden] { display:none; }\n.ga-message { padding:24px; color:var(--muted); }\n.ga-monitor { overflow:auto; }\n.ga-pair { word-break:break-all; }\n", xt = [
	"graph",
	"compare",
	"overflow",
	"monitor"
];
function $() {
	try {
		if (window.parent && window.parent !== window && window.parent.location.href) return window.parent;
	} catch {}
	return null;
}
var St = class t {
	apiBase;
	root;
	api;
	store;
	engine;
	meta = null;
	legend = oe;
	theme = se;
	files = [];
	busyCount = 0;
	loaded = !1;
	ctx;
	graph;
	compare;
	overflow;
	monitorBox;
	monitorMounted = !1;
	body;
	banner;
	bannerText;
	fileSelect;
	stepSelect;
	rankSelect;
	microSelect;
	langSelect;
	tabButtons = /* @__PURE__ */ new Map();
	message;
	urlTimer = null;
	metaPrefetch = null;
	constructor(e, t) {
		this.apiBase = e, this.api = new r(e), this.engine = new ae(new URL("static/worker.js", e).href);
		let n = $(), i = window.location.hash.replace(/^#/, ""), a = n ? be(n.location.hash) : null, o = ve(i || a || "");
		/(^|&)lang=/.test(i || a || "") || (o.lang = u(navigator.languages ?? [])), s(o.lang), this.store = new me(o), this.ctx = this.makeContext();
		let c = document.createElement("style");
		c.textContent = bt, document.head.append(c), this.fileSelect = K("select", {
			testid: "file-select",
			title: l("file")
		}), this.stepSelect = K("select", {
			testid: "step-select",
			title: l("step")
		}), this.rankSelect = K("select", {
			testid: "rank-select",
			title: l("rank")
		}), this.microSelect = K("select", {
			testid: "microstep-select",
			title: l("microStep")
		}), this.langSelect = K("select", {
			testid: "lang-select",
			title: l("language")
		}, J("en", "English"), J("zh", "中文")), this.langSelect.value = o.lang, this.fileSelect.addEventListener("change", () => {
			let e = this.files[parseInt(this.fileSelect.value, 10)];
			e && this.openFile(e.run, e.file.file, !0);
		}), this.stepSelect.addEventListener("change", () => this.changeGraph({ step: parseInt(this.stepSelect.value, 10) })), this.rankSelect.addEventListener("change", () => this.changeGraph({ rank: parseInt(this.rankSelect.value, 10) })), this.microSelect.addEventListener("change", () => this.changeGraph({ microStep: parseInt(this.microSelect.value, 10) })), this.langSelect.addEventListener("change", () => {
			this.store.set({ lang: this.langSelect.value }), this.flushUrl(), this.rebuild();
		});
		let d = K("div", {
			class: "ga-tabs",
			role: "tablist"
		}), f = {
			graph: "tabGraph",
			compare: "tabCompare",
			overflow: "tabOverflow",
			monitor: "tabMonitor"
		};
		for (let e of xt) {
			let t = K("button", {
				testid: `view-tab-${e}`,
				role: "tab",
				text: l(f[e])
			});
			t.addEventListener("click", () => this.showTab(e)), this.tabButtons.set(e, t), d.append(t);
		}
		let p = K("div", { class: "ga-topbar" }, K("label", { class: "ga-inline" }, `${l("file")}: `, this.fileSelect), K("label", { class: "ga-inline" }, `${l("step")}: `, this.stepSelect), K("label", { class: "ga-inline" }, `${l("rank")}: `, this.rankSelect), K("label", { class: "ga-inline" }, `${l("microStep")}: `, this.microSelect), d, K("span", { class: "ga-spacer" }), this.langSelect);
		this.bannerText = K("span", { class: "ga-error-text" });
		let m = K("button", {
			class: "ga-small",
			text: "×",
			"aria-label": "close"
		});
		m.addEventListener("click", () => this.banner.hidden = !0), this.banner = K("div", {
			class: "ga-error",
			testid: "error-banner",
			role: "alert",
			hidden: !0
		}, this.bannerText, K("span", { class: "ga-spacer" }), m), this.message = K("div", { class: "ga-message" }), this.graph = new vt(this.ctx), this.compare = new He(this.ctx), this.overflow = new yt(this.ctx), this.monitorBox = K("div", { class: "ga-monitor" }), this.body = K("div", { class: "ga-body" }), this.root = K("div", {
			class: "ga-root",
			testid: "ga-root",
			lang: o.lang
		}, p, this.banner, this.body), t.append(this.root), this.store.subscribe(() => this.scheduleUrl()), this.followDarkMode(), this.installHooks();
	}
	makeContext() {
		return {
			api: this.api,
			store: this.store,
			engine: this.engine,
			apiBase: this.apiBase,
			meta: () => this.meta,
			graphKey: () => this.graphKey(),
			sideKey: (e) => ({
				...this.graphKey(),
				side: e
			}),
			theme: () => this.theme,
			legend: () => this.legend,
			setLegend: (e) => this.legend = e,
			error: (e) => this.showError(e),
			busy: (e) => this.busyCount += e,
			goToNode: (e, t, n) => this.goToNode(e, t, n)
		};
	}
	graphKey() {
		let e = this.store.state;
		return {
			run: e.run,
			file: e.file,
			step: e.step,
			rank: e.rank
		};
	}
	showError(t) {
		let n = t instanceof e || t instanceof Error ? t.message : String(t);
		this.bannerText.textContent = n, this.banner.hidden = !1;
	}
	scheduleUrl() {
		this.urlTimer && clearTimeout(this.urlTimer), this.urlTimer = setTimeout(() => this.flushUrl(), 150);
	}
	flushUrl() {
		let e = _e(this.store.state);
		try {
			history.replaceState(history.state, "", `${location.pathname}${location.search}#${e}`);
		} catch {}
		let t = $();
		if (t) try {
			let n = ye(t.location.hash, e);
			t.history.replaceState(t.history.state, "", t.location.pathname + t.location.search + n);
		} catch {}
	}
	followDarkMode() {
		let e = window.matchMedia?.("(prefers-color-scheme: dark)"), t = $(), n = () => {
			let n = t?.document.body ? t.document.body.classList.contains("dark-mode") : !!e?.matches;
			this.theme = n ? ce : se, this.root.classList.toggle("ga-dark", n), this.loaded && this.graph.redraw();
		};
		e?.addEventListener?.("change", n), t?.document.body && new MutationObserver(n).observe(t.document.body, {
			attributes: !0,
			attributeFilter: ["class"]
		}), n();
	}
	installHooks() {
		let e = this;
		window.__tbprobe = {
			get ready() {
				return e.loaded && e.busyCount === 0;
			},
			set ready(e) {},
			visibleNodes: (e) => this.graph.panes.get(e)?.shownNames() ?? [],
			nodeRect: (e, t) => this.graph.panes.get(e)?.nodeRect(t) ?? null,
			selected: () => this.store.state.selected?.name ?? null,
			expanded: (e) => this.graph.panes.get(e)?.expandedNames() ?? [],
			stats: (e) => {
				let t = this.graph.panes.get(e);
				return t ? {
					draws: t.draws,
					lastDrawMs: t.lastDrawMs,
					visited: t.lastVisited
				} : null;
			}
		};
	}
	prefetch(e, t, n) {
		this.metaPrefetch && this.metaPrefetch.run === e && this.metaPrefetch.file === t || (this.metaPrefetch = {
			run: e,
			file: t,
			meta: this.api.meta({
				run: e,
				file: t
			})
		}, this.metaPrefetch.meta.catch(() => void 0));
		let r = this.store.state;
		for (let i of n) {
			let n = {
				run: e,
				file: t,
				step: r.step,
				rank: r.rank,
				side: i
			};
			this.api.root(n).then((e) => this.api.children(n, e.name, r.microStep, 0, Je)).catch(() => void 0);
		}
	}
	async start() {
		this.busyCount++, performance.mark?.("tbprobe:start");
		try {
			let e = this.store.state;
			e.run && e.file && this.prefetch(e.run, e.file, ["NPU"]);
			let t = await this.api.runs();
			performance.mark?.("tbprobe:runs"), this.files = t.runs.flatMap((e) => e.files.map((t) => ({
				run: e.run,
				file: t
			}))), q(this.fileSelect), this.files.forEach((e, t) => {
				let n = e.run === "." ? e.file.file : `${e.run}/${e.file.file}`, r = J(String(t), e.file.error ? `${n} (${e.file.error})` : n);
				r.disabled = !!e.file.error, this.fileSelect.append(r);
			});
			let n = this.store.state, r = this.files.find((e) => e.run === n.run && e.file.file === n.file);
			if (r ??= this.files.find((e) => e.file.graph_type === "compare" && !e.file.error) ?? this.files.find((e) => !e.file.error) ?? this.files[0], !r) {
				this.message.textContent = l("noFiles"), this.showTab(n.tab === "monitor" ? "monitor" : "graph"), this.loaded = !0;
				return;
			}
			await this.openFile(r.run, r.file.file, r.run !== n.run || r.file.file !== n.file);
		} catch (e) {
			this.showError(e), this.loaded = !0;
		} finally {
			this.busyCount--;
		}
	}
	async openFile(e, t, n) {
		this.busyCount++;
		try {
			let r = this.files.findIndex((n) => n.run === e && n.file.file === t);
			r >= 0 && (this.fileSelect.value = String(r));
			let i = this.files[r]?.file;
			this.prefetch(e, t, i?.graph_type === "compare" ? ["NPU", "Bench"] : ["NPU"]);
			let a = await this.metaPrefetch.meta;
			this.metaPrefetch = null, performance.mark?.("tbprobe:meta"), this.meta = a, this.legend = a.node_colors && Object.keys(a.node_colors).length ? a.node_colors : oe;
			let o = this.store.state, s = n ? {
				...D(),
				lang: o.lang,
				tab: o.tab,
				colorMode: o.colorMode,
				run: e,
				file: t
			} : {
				run: e,
				file: t
			}, c = a.steps.length ? a.steps : [0], l = a.ranks.length ? a.ranks : [0], u = {
				...o,
				...s
			};
			c.includes(u.step) || (s.step = c[0]), l.includes(u.rank) || (s.rank = l[0]), u.microStep >= a.micro_steps && (s.microStep = -1), this.store.set(s), this.fillSelectors(a), await this.reloadViews(), performance.mark?.("tbprobe:loaded"), this.loaded = !0;
		} catch (e) {
			this.showError(e), this.loaded = !0;
		} finally {
			this.busyCount--;
		}
	}
	fillSelectors(e) {
		let t = this.store.state, n = (e, t, n) => {
			q(e);
			for (let n of t) e.append(J(String(n), String(n)));
			e.value = String(n), e.disabled = t.length < 2;
		};
		n(this.stepSelect, e.steps.length ? e.steps : [0], t.step), n(this.rankSelect, e.ranks.length ? e.ranks : [0], t.rank), q(this.microSelect), this.microSelect.append(J("-1", l("all")));
		for (let t = 0; t < e.micro_steps; t++) this.microSelect.append(J(String(t), String(t)));
		this.microSelect.value = String(t.microStep), this.microSelect.disabled = e.micro_steps < 2;
	}
	changeGraph(e) {
		this.store.set(e), this.reloadViews();
	}
	async reloadViews() {
		this.busyCount++;
		try {
			this.showTab(this.store.state.tab), await this.graph.load();
			let e = this.store.state.tab;
			e === "compare" && await this.compare.reload(), e === "overflow" && await this.overflow.reload();
		} catch (e) {
			this.showError(e);
		} finally {
			this.busyCount--;
		}
	}
	showTab(e) {
		let t = e !== this.store.state.tab;
		this.store.set({ tab: e });
		for (let [t, n] of this.tabButtons) n.classList.toggle("ga-active", t === e), n.setAttribute("aria-selected", String(t === e));
		let n = this.meta?.graph_type === "compare";
		if (this.tabButtons.get("compare").disabled = !!this.meta && !n, q(this.body), e === "monitor") this.monitorMounted || (this.monitorMounted = !0, Fe(this.monitorBox, {
			apiBase: this.apiBase.replace(/\/$/, ""),
			lang: c()
		})), this.body.append(this.monitorBox);
		else if (!this.meta) this.body.append(this.message);
		else if (e === "graph") {
			this.body.append(this.graph.el);
			for (let e of this.graph.panes.values()) e.requestDraw();
		} else e === "compare" ? (this.body.append(this.compare.el), t && this.compare.reload()) : (this.body.append(this.overflow.el), t && this.overflow.reload());
	}
	async goToNode(e, t, n) {
		if (t) {
			this.busyCount++;
			try {
				n !== void 0 && n !== this.store.state.rank && (this.store.set({
					rank: n,
					selected: {
						side: e,
						name: t
					},
					tab: "graph"
				}), this.rankSelect.value = String(n), await this.reloadViews()), this.showTab("graph"), await this.graph.select(e, t, {
					reveal: !0,
					focus: !0
				});
			} finally {
				this.busyCount--;
			}
		}
	}
	rebuild() {
		let e = this.root.parentElement;
		this.root.remove(), new t(this.apiBase, e).start();
	}
};
// src/main.ts
async function Ct() {
	document.body.style.margin = "0", await new St(n(import.meta.url), document.body).start();
}
export { Ct as render };
