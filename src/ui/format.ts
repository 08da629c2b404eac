// Number and size formatting shared by the panels.

/** Up to four decimals, always with a decimal point: 2 → "2.0", 0.375 → "0.375", 1/3 → "0.3333". */
export function formatNumber(x: number): string {
  const s = String(Number(x.toFixed(4)));
  return /[.e]/.test(s) || !Number.isFinite(x) ? s : `${s}.0`;
}

export function formatBytes(n: number): string {
  if (n >= 2 ** 30) return `${(n / 2 ** 30).toFixed(1)} GiB`;
  if (n >= 2 ** 20) return `${(n / 2 ** 20).toFixed(1)} MiB`;
  if (n >= 2 ** 10) return `${(n / 2 ** 10).toFixed(0)} KiB`;
  return `${n} B`;
}

/** A duration for people: "850 ms" under a second, else seconds to 2 decimals ("12.34 s"), minutes past 100 s ("4 min 05 s"). */
export function formatSeconds(s: number): string {
  if (!Number.isFinite(s)) return String(s);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 100) return `${s.toFixed(2)} s`;
  const total = Math.round(s);
  return `${Math.floor(total / 60)} min ${String(total % 60).padStart(2, '0')} s`;
}

/** A share as a percentage to one decimal: 0.375 → "37.5%". */
export const formatPercent = (x: number): string => `${(100 * x).toFixed(1)}%`;
