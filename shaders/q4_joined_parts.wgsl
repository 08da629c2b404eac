// Where output (m, n) of a product on a joined weight (q/k/v or gate/up in one [n, k] weight)
// lives: its part's own [rows, width] block, the parts stored one after another, as separate
// products into back-to-back outputs would write them. Parts: columns [0, split1), [split1,
// split2), [split2, n); split1 = split2 = n is one plain [rows, n] output.
fn joined_at(m: u32, n: u32, rows: u32, width: u32, split1: u32, split2: u32) -> u32 {
  if (n < split1) {
    return m * split1 + n;
  }
  if (n < split2) {
    return rows * split1 + m * (split2 - split1) + (n - split1);
  }
  return rows * split2 + m * (width - split2) + (n - split2);
}
