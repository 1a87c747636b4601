// Everything tinyllm offers, in one include.
#pragma once

#include "tinyllm/tensor/autograd.h"
#include "tinyllm/tensor/ops.h"
#include "tinyllm/tensor/random.h"
#include "tinyllm/tensor/storage.h"
#include "tinyllm/tensor/tensor.h"

#include "tinyllm/nn/attention.h"
#include "tinyllm/nn/block.h"
#include "tinyllm/nn/embedding.h"
#include "tinyllm/nn/gpt.h"
#include "tinyllm/nn/layer_norm.h"
#include "tinyllm/nn/linear.h"
#include "tinyllm/nn/mlp.h"
#include "tinyllm/nn/module.h"

#include "tinyllm/optim/adamw.h"
#include "tinyllm/optim/optimizer.h"
#include "tinyllm/optim/sgd.h"

#include "tinyllm/train/data.h"
#include "tinyllm/train/trainer.h"
