/* What _cstats exports to _cgrad through the capsule "tbprobe.collector._cstats._item_api" (_cstats_items.h):
   the dump.json item of a plain CPU tensor from facts the caller read itself, and the step's health figure
   of an item made before. */
#ifndef TBPROBE_CSTATS_API_H
#define TBPROBE_CSTATS_API_H
#include <stdint.h>

#define TBPROBE_ITEM_API "tbprobe.collector._cstats._item_api"

typedef struct {
    /* (host_items, t, dtype, sizes, ndim, data, requires_grad, &health) -> a new item (its health figure stored
       and added to the step's), None (a new reference: not the plain case) or NULL with an exception */
    PyObject *(*item_from_facts)(PyObject *, PyObject *, PyObject *, const int64_t *, int, const void *, int,
                                 double *);
    /* the same for a tensor of any size: for a caller that remembers what it summarised (_cgrad's ItemReader),
       where HostItems itself leaves tensors of cache_min elements or more to the Python path, which does */
    PyObject *(*item_from_facts_any)(PyObject *, PyObject *, PyObject *, const int64_t *, int, const void *, int,
                                     double *);
    /* (host_items, health): adds an item's health figure to the step's again (the same item met twice) */
    void (*note)(PyObject *, double);
} tbprobe_item_api;

#endif
