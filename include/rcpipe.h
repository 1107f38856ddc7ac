/* rcpipe.h: the umbrella header. Include this one. */
#ifndef RCPIPE_H
#define RCPIPE_H

#include "rcpipe/common.h"
#include "rcpipe/reply.h"
#include "rcpipe/conn.h"
#include "rcpipe/cluster.h"
#include "rcpipe/pubsub.h"
#include "rcpipe/adapter.h"

#endif
