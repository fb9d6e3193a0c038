#pragma once

#include <cstddef>

#include "common/base/status.h"
#include "common/collective/collective.h"
#include "daemon/train/whole_checkpoint.h"

namespace tfd {

// Every task of a ring, once it is formed: the chief's WholeRestore reaches every member, over
// `first` when given, then over `ring` (each broadcast from its rank 0, the chief's first; model
// parallel: the ring of stage 0 in every replica, then each replica's stages). `restore` is the
// chief's on entry, filled in elsewhere; its early-stopping state stays the chief's (the chief
// alone judges epochs). Of the error feedback's residuals each member keeps only the one
// FeedbackFor gives it (its rank's, or the single mean; `ring`'s rank), the chief included.
Status ShareWholeRestore(collective::Collective* first, collective::Collective& ring, std::size_t num_params, int num_slots,
                         train::WholeRestore* restore);

}  // namespace tfd
