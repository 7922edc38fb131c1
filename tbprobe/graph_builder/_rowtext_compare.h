/* Statistics compare of a whole entry pair (compare_plain): the node rules and the texts.
   Part of _rowtext.c, which includes it once (a unity build: the module is one translation unit). */

/* json.dumps(msgs) as a JSON string: the Err_message field */
static int put_messages(Buf *b, const Slot *s) {
    if (s->n_msgs == 0)
        return PUT_LIT(b, "\"[]\"");
    char inner_stack[512];
    Buf inner = {inner_stack, 0, sizeof inner_stack, 0};
    int rc = -1;
    if (PUT_LIT(&inner, "[") < 0)
        goto done;
    for (int i = 0; i < s->n_msgs; i++)
        if ((i && PUT_LIT(&inner, ", ") < 0) || PUT_LIT(&inner, "\"") < 0 || put_escaped(&inner, s->msgs[i]) < 0 ||
            PUT_LIT(&inner, "\"") < 0)
            goto done;
    if (PUT_LIT(&inner, "]") < 0)
        goto done;
    PyObject *text = buf_str(&inner);
    if (text == NULL)
        goto done;
    rc = PUT_LIT(b, "\"") < 0 || put_escaped(b, text) < 0 || PUT_LIT(b, "\"") < 0 ? -1 : 0;
    Py_DECREF(text);
done:
    buf_free(&inner);
    return rc;
}

/* max() of the NormRelativeErrs of one side, with max()'s own comparisons (NaN stays where it lands) */
static int worst_nre(const Slot *slots, int n, int is_output, double *out) {
    int found = 0;
    for (int i = 0; i < n; i++) {
        const Slot *s = &slots[i];
        if (s->is_null || s->is_output != is_output || !s->has_nre)
            continue;
        if (!found || s->nre > *out)
            *out = s->nre;
        found = 1;
    }
    return found;
}

static PyObject *side_text(Buf *heads, const Slot *slots, int n, int is_output) {
    char stack[4096];
    Buf b = {stack, 0, sizeof stack, 0};
    PyObject *out = NULL;
    int count = 0;
    for (int i = 0; i < n; i++) {
        const Slot *s = &slots[i];
        if (s->is_output != is_output)
            continue;
        if (put(&b, count ? ", " : "{", count ? 2 : 1) < 0 || put(&b, heads->p + s->start, s->end - s->start) < 0)
            goto done;
        count++;
        if (s->is_null)
            continue;
        const char *level = LEVEL_TEXT[s->level];
        if (PUT_LIT(&b, ", \"Requires_grad Consistent\": \"") < 0 ||
            (s->grad_ok ? PUT_LIT(&b, "True") : PUT_LIT(&b, "False")) < 0 || PUT_LIT(&b, "\", \"Result\": \"") < 0 ||
            put(&b, level, (Py_ssize_t)strlen(level)) < 0 || PUT_LIT(&b, "\", \"Err_message\": ") < 0 ||
            put_messages(&b, s) < 0 || PUT_LIT(&b, "}") < 0)
            goto done;
    }
    if ((count ? PUT_LIT(&b, "}") : PUT_LIT(&b, "{}")) < 0)
        goto done;
    out = buf_str(&b);
done:
    buf_free(&b);
    return out;
}

static PyObject *compare_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "compare_plain(debug_name, de, bench_name, be, exempt, placeholder, msgs, "
                                         "bench_texts, item_text)");
        return NULL;
    }
    PyObject *dname = args[0], *de = args[1], *bname = args[2], *be = args[3], *msgs = args[6];
    int exempt = PyObject_IsTrue(args[4]), placeholder = PyObject_IsTrue(args[5]), want_b = PyObject_IsTrue(args[7]);
    if (exempt < 0 || placeholder < 0 || want_b < 0)
        return NULL;
    if (!PyUnicode_CheckExact(dname) || !PyUnicode_CheckExact(bname) || !PyDict_CheckExact(de) ||
        !PyDict_CheckExact(be) || !PyTuple_CheckExact(msgs) || PyTuple_GET_SIZE(msgs) < 8)
        Py_RETURN_NONE;
    for (int i = 0; i < 7; i++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(msgs, i)))
            Py_RETURN_NONE;
    /* the mixed-precision note, None with strict_dtype */
    if (PyTuple_GET_ITEM(msgs, 7) != Py_None && !PyUnicode_CheckExact(PyTuple_GET_ITEM(msgs, 7)))
        Py_RETURN_NONE;
    int has = PyUnicode_Contains(dname, s_parameters_grad);
    if (has == 0)
        has = PyUnicode_Contains(bname, s_parameters_grad);
    if (has < 0)
        return NULL;
    if (has)
        Py_RETURN_NONE;
    Pairs *dp = PyMem_Malloc(2 * sizeof(Pairs));
    Slot *slots = PyMem_Malloc(MAX_PAIRS * sizeof(Slot));
    char heads_stack[8192], name_stack[256];
    Buf heads = {heads_stack, 0, sizeof heads_stack, 0}, nb = {name_stack, 0, sizeof name_stack, 0};
    PyObject *result = NULL, *ins = NULL, *outs = NULL, *worst = NULL, *prec = NULL, *btexts = NULL;
    if (dp == NULL || slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Pairs *bp = dp + 1;
    /* the entries are the caller's and no Python code runs until the texts are made: borrowed items are safe */
    int ok = collect_pairs(de, dp);
    if (ok > 0)
        ok = collect_pairs(be, bp);
    if (ok < 0)
        goto done;
    if (ok == 0 || dp->n == 0)
        goto none;
    /* an argument the bench alone gives (absent or None in the debug call): compare.MSG_ONE_SIDED, the general
       path's (the other way round, a debug argument without its bench pair, is left to it below) */
    for (int i = 0; i < bp->n; i++) {
        const Pair *q = &bp->p[i], *p;
        if (q->group == 0 && q->item != Py_None && ((p = bench_pair(dp, q)) == NULL || p->item == Py_None))
            goto none;
    }
    if (put_escaped(&nb, dname) < 0)
        goto done;
    int n_slots = 0;
    for (int i = 0; i < dp->n; i++) {
        const Pair *p = &dp->p[i];
        Slot *s = &slots[i];
        memset(s, 0, sizeof *s);
        s->is_output = i >= dp->n_in;
        s->start = heads.n;
        if (PUT_LIT(&heads, "\"") < 0 || put(&heads, nb.p, nb.n) < 0 || PUT_LIT(&heads, ".") < 0 ||
            put(&heads, GROUP_TEXT[p->group], (Py_ssize_t)strlen(GROUP_TEXT[p->group])) < 0)
            goto done;
        if (p->key != NULL) {
            if (put_escaped(&heads, p->key) < 0)
                goto done;
        } else {
            char t[32];
            if (put(&heads, t, snprintf(t, sizeof t, "%zd", p->index)) < 0)
                goto done;
        }
        /* ".parameters." in the key (escaping leaves those characters as they are, and adds none of them) */
        Py_ssize_t key_len = heads.n - s->start;
        for (Py_ssize_t j = 0; j + 12 <= key_len && !s->in_params; j++)
            s->in_params = memcmp(heads.p + s->start + j, ".parameters.", 12) == 0;
        if (PUT_LIT(&heads, "\": {") < 0)
            goto done;
        if (p->item == Py_None) {
            if (PUT_LIT(&heads, "\"value\": \"null\"}") < 0)
                goto done;
            s->is_null = 1;
            s->end = heads.n;
            continue;
        }
        const Pair *q = bench_pair(bp, p);
        if (q == NULL || q->item == Py_None)
            goto none;
        PyObject *v[8], *w[8], *dv, *bv;
        int rc;
        if (std_values(p->item, v) && std_values(q->item, w)) {
            rc = std_slot(&heads, s, v, w, exempt, msgs);
        } else {
            int a = scalar_value(p->item, &dv), c = a > 0 ? scalar_value(q->item, &bv) : a;
            if (a < 0 || c < 0)
                goto done;
            rc = a && c ? scalar_slot(&heads, s, p->item, dv, bv, exempt, msgs) : 1;
        }
        if (rc < 0)
            goto done;
        if (rc > 0)
            goto none;
        s->end = heads.n;
        n_slots++;
    }
    if (n_slots == 0)
        goto none;
    /* the node rules (fast_path._finish) */
    double worst_out = 0, worst_in = 0;
    int has_out = worst_nre(slots, dp->n, 1, &worst_out);
    if (!exempt && !placeholder && has_out) {
        /* inputs without a NormRelativeErr (a Norm of 0 on both sides, an integer input's null Norm): 0, as the
           reference counts N/A; else an error in the output of such a node was never flagged */
        if (!worst_nre(slots, dp->n, 0, &worst_in))
            worst_in = 0;
        Slot *target = NULL;
        for (int i = 0; i < dp->n && target == NULL; i++)
            if (!slots[i].is_null && slots[i].is_output)
                target = &slots[i];
        for (int i = dp->n - 1; i >= 0 && target == NULL; i--)
            if (!slots[i].is_null)
                target = &slots[i];
        if (worst_in < 0.1) /* each output past the bound (the reference's RelativeErrChecker) */
            for (int i = 0; i < dp->n; i++)
                if (!slots[i].is_null && slots[i].is_output && slots[i].has_nre && slots[i].nre > 0.5)
                    flag(&slots[i], LEVEL_ERROR, PyTuple_GET_ITEM(msgs, 5));
        /* the reference's RelativeWarnChecker, as compare.norm_warns: past 10 % over exactly matching inputs,
           else 10 times the worst input's error */
        if (worst_in == 0 ? worst_out > 0.1 : worst_out > 10 * worst_in)
            flag(target, LEVEL_WARNING, PyTuple_GET_ITEM(msgs, 6));
    }
    int level = LEVEL_PASS, inputs_ok = 1;
    for (int i = 0; i < dp->n; i++) {
        const Slot *s = &slots[i];
        if (s->is_null)
            continue;
        if (s->level > level)
            level = s->level;
        if (!s->is_output && (s->level != LEVEL_PASS || (s->has_nre && s->nre >= 0.1)) && !s->in_params)
            inputs_ok = 0;
    }
    ins = side_text(&heads, slots, dp->n, 0);
    outs = ins ? side_text(&heads, slots, dp->n, 1) : NULL;
    if (outs == NULL)
        goto done;
    worst = has_out ? PyFloat_FromDouble(worst_out) : Py_NewRef(Py_None);
    prec = level == LEVEL_WARNING ? PyFloat_FromDouble(0.5) : PyLong_FromLong(level == LEVEL_ERROR ? 1 : 0);
    if (worst == NULL || prec == NULL)
        goto done;
    if (want_b) {
        PyObject *eargs[4] = {args[8], bname, be, Py_False};
        btexts = entry_texts(NULL, eargs, 4);
        if (btexts == NULL)
            goto done;
    } else {
        btexts = Py_NewRef(Py_None);
    }
    result = PyTuple_Pack(6, prec, ins, outs, worst, inputs_ok ? Py_True : Py_False, btexts);
    goto done;
none:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    Py_XDECREF(worst);
    Py_XDECREF(prec);
    Py_XDECREF(btexts);
    PyMem_Free(dp);
    PyMem_Free(slots);
    buf_free(&heads);
    buf_free(&nb);
    return result;
}
