# Plots of bench/compare: gnuplot -e "dir='OUT'" bench/plots.gp
# Reads OUT/threads.dat, OUT/cpu_load.dat and OUT/p99_delay.dat (written by
# bench/compare-lib/report.py; a missing or empty file skips its plot) and
# writes OUT/compare-*.png with the pngcairo terminal (in gnuplot-nox).
if (!exists("dir")) dir = "."
have(f) = system("test -s '" . f . "' && echo 1 || echo 0") + 0
# The column titles are in the data files' "# ..." first line.
header(f) = system("head -n 1 '" . f . "' | sed 's/^# *//'")

set terminal pngcairo size 800,500 font "sans,10"
set key top left
set grid

f = dir . "/threads.dat"
if (have(f)) {
    set output dir . "/compare-threads.png"
    set title "GET 64 B, synchronous callers: throughput against threads"
    set xlabel "application threads"
    set ylabel "ops/s"
    set logscale x 2
    set yrange [0:*]
    plot f using 1:2 with linespoints lw 2 title "classic (hiredis, connection per thread)", \
         f using 1:3 with linespoints lw 2 title "rcpipe (one shared handle)"
    unset logscale x
    set yrange [*:*]
}

f = dir . "/cpu_load.dat"
if (have(f)) {
    h = header(f)
    n = words(h)
    set output dir . "/compare-cpu-load.png"
    set title "GET 64 B, 64 threads at fixed offered load: server CPU per command"
    set key bottom left
    set xlabel "offered load (ops/s)"
    set ylabel "server CPU (µs per command, masters)"
    set xrange [0:*]
    set yrange [0:*]
    plot for [i=2:n] f using 1:i with linespoints lw 2 \
        title (word(h, i) eq "classic" ? "classic" : "rcpipe, batch-delay-us " . word(h, i)[3:])
    set xrange [*:*]
    set yrange [*:*]
}

f = dir . "/p99_delay.dat"
if (have(f)) {
    h = header(f)
    n = words(h)
    set output dir . "/compare-p99-delay.png"
    set title "GET 64 B, 64 threads, rcpipe: p99 latency against the batching pause"
    set xlabel "batch-delay-us"
    set ylabel "p99 latency (µs, from the intended send time)"
    set yrange [0:*]
    plot for [i=2:n] f using 1:i with linespoints lw 2 \
        title "offered load " . word(h, i) . " of classic max"
}
