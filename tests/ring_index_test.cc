// Tests of kvring/ring_index.h: live range, wrap, appends that need growth, rollback limits.
#include "kvring/ring_index.h"

#include <gtest/gtest.h>

namespace kvring {
namespace {

TEST(RingIndex, PositionsWrapOntoSlotsAndTheOldestAreForgotten) {
  RingIndex index(/*num_slots=*/32, /*keep=*/7, /*max_rollback=*/0, /*context=*/1000);
  EXPECT_TRUE(index.Wraps());
  EXPECT_EQ(index.CheckAppend(0, 20), Status::kOk);
  index.Append(20);
  EXPECT_EQ(index.FirstPos(), 0u);
  EXPECT_EQ(index.EndPos(), 20u);
  index.Append(20);
  EXPECT_EQ(index.FirstPos(), 8u);  // 40 positions, 32 slots
  EXPECT_EQ(index.SlotOf(39), 7u);
  EXPECT_EQ(index.SlotOf(8), 8u);
  EXPECT_FALSE(index.Holds(7));
  EXPECT_TRUE(index.Holds(8));
}

TEST(RingIndex, AppendIsRefusedAtAWrongPositionPastTheContextOrWhenEmpty) {
  RingIndex index(32, 7, 0, 40);
  EXPECT_EQ(index.CheckAppend(0, 0), Status::kEmptyBatch);
  EXPECT_EQ(index.CheckAppend(1, 1), Status::kWrongPosition);
  index.Append(25);
  EXPECT_EQ(index.CheckAppend(24, 1), Status::kWrongPosition);
  EXPECT_EQ(index.CheckAppend(25, 16), Status::kContextFull);
  EXPECT_EQ(index.CheckAppend(25, 15), Status::kOk);
}

TEST(RingIndex, ABatchThatWouldOverwriteTheWindowNeedsMoreSlots) {
  RingIndex index(32, /*keep=*/7, 0, 1000);
  EXPECT_EQ(index.SlotsNeededFor(25), 32u);
  EXPECT_EQ(index.CheckAppend(0, 25), Status::kOk);
  EXPECT_EQ(index.CheckAppend(0, 26), Status::kBatchTooLarge);  // 7 + 26 > 32
  EXPECT_EQ(index.SlotsNeededFor(26), 33u);
  const RingIndex grown = index.Resized(64);
  EXPECT_EQ(grown.CheckAppend(0, 26), Status::kOk);
}

TEST(RingIndex, RollbackStaysWithinHeadroomAndKeepsTheWindow) {
  RingIndex index(32, /*keep=*/15, /*max_rollback=*/16, 1000);
  index.Append(10);
  EXPECT_EQ(index.CheckRollback(11), Status::kRollbackTooFar);  // more than held
  EXPECT_EQ(index.CheckRollback(10), Status::kOk);
  for (int i = 0; i < 9; ++i) index.Append(10);                 // holds [68, 100)
  EXPECT_EQ(index.CheckRollback(17), Status::kRollbackTooFar);  // past the headroom
  EXPECT_EQ(index.CheckRollback(16), Status::kOk);
  index.Rollback(16);  // holds [68, 84): the 15 before 84 are still there
  EXPECT_EQ(index.EndPos(), 84u);
  EXPECT_EQ(index.FirstPos(), 68u);
  EXPECT_EQ(index.CheckRollback(2), Status::kRollbackTooFar);  // would leave 14 of 15
  EXPECT_EQ(index.CheckRollback(1), Status::kOk);
  index.Append(4);  // overwrites the slots of discarded positions first
  EXPECT_EQ(index.FirstPos(), 68u);
  EXPECT_EQ(index.EndPos(), 88u);
}

TEST(RingIndex, FlatIndexNeverWrapsAndRollsBackWithinHeadroom) {
  RingIndex index(64, /*keep=*/50, /*max_rollback=*/4, /*context=*/50);
  EXPECT_FALSE(index.Wraps());
  index.Append(50);
  EXPECT_EQ(index.FirstPos(), 0u);
  EXPECT_EQ(index.CheckAppend(50, 1), Status::kContextFull);
  EXPECT_EQ(index.CheckRollback(4), Status::kOk);
  EXPECT_EQ(index.CheckRollback(5), Status::kRollbackTooFar);
  index.Clear();
  EXPECT_EQ(index.EndPos(), 0u);
  EXPECT_EQ(index.CheckAppend(0, 50), Status::kOk);
}

}  // namespace
}  // namespace kvring
