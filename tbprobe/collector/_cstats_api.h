/* What _cstats exports to _cgrad through the capsule "tbprobe.collector._cstats._item_api": the dump.json item of
   a plain small CPU tensor from facts the caller read itself (_cstats_items.h, item_from_facts). */
#ifndef TBPROBE_CSTATS_API_H
#define TBPROBE_CSTATS_API_H
#include <stdint.h>

#define TBPROBE_ITEM_API "tbprobe.collector._cstats._item_api"

/* (host_items, t, dtype, sizes, ndim, data, requires_grad) -> a new item, None (new reference) or NULL */
typedef PyObject *(*tbprobe_item_from_facts)(PyObject *, PyObject *, PyObject *, const int64_t *, int,
                                             const void *, int);

#endif
