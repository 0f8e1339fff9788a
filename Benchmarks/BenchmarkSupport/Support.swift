// What the benchmark programs share: CPU and wall-time figures, printing as it
// goes, the Bumble processes they measure against on Rootcanal, and stopping those
// (every child, by PID) when a signal stops the benchmark.

import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// User + system CPU seconds of this process so far.
public func cpu() -> Double {
    var u = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
    return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
}

public func seconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18 }

/// Prints a line at once (figures appear as they are measured).
public func say(_ s: String) { print(s); fflush(nil) }

/// Runs a program to its end and returns its stdout (stderr is discarded).
public func output(of executable: String, _ arguments: [String]) throws -> Data {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments
    let out = Pipe()
    p.standardOutput = out
    p.standardError = FileHandle.nullDevice
    try p.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return data
}

/// Bumble's GATT server (`bumble_gatt_peripheral.py --forever`) on a Rootcanal port, at
/// F1:F2:F3:F4:F5:F6 (random); stop it with `RootcanalProcess.kill`.
public func startBumbleServer(python: String, root: String, port: UInt16) throws -> Process {
    let server = Process()
    server.executableURL = URL(fileURLWithPath: python)
    server.arguments = [root + "/Tests/InteropTests/bumble_gatt_peripheral.py", String(port), "--forever"]
    server.standardOutput = FileHandle.nullDevice
    server.standardError = FileHandle.nullDevice
    try server.run()
    return server
}

/// One spinning process per online CPU at nice 19, so no CPU goes idle while they run:
/// what a request costs when the CPUs are busy, without the wake-up of an idle CPU (on
/// this VM a halted virtual CPU resumes with cold caches). Stop them with `stopSpinners`.
/// (SCHED_IDLE spinners, `chrt --idle 0`, hide less of it: the scheduler still treats
/// their CPUs as idle when it places a waking thread.)
public func startSpinners() throws -> [Process] {
    let cpus = max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    return try (0..<cpus).map { _ in
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/nice")
        p.arguments = ["-n", "19", "/bin/sh", "-c", "while :; do :; done"]
        try p.run()
        return p
    }
}

/// Stops what `startSpinners` started, by PID, and waits for each to end.
public func stopSpinners(_ spinners: [Process]) {
    for p in spinners where p.isRunning {
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
    }
}

/// A benchmark stopped by a signal stops what it started first: on SIGINT, SIGTERM or
/// SIGHUP it kills every child process (Rootcanal, the Bumble peers, the spinners,
/// tshark), by PID, then exits 128 + the signal. Ctrl-C reaches the whole process
/// group anyway; SIGTERM from a supervisor or `timeout` reaches only the benchmark,
/// and left its Rootcanal and Bumble running. Call once, first thing.
public func stopChildrenOnSignals() {
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        _ = signal(sig, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
        source.setEventHandler {
            for pid in childProcesses() { kill(pid, SIGKILL) }
            exit(128 + sig)
        }
        source.resume()
        signalSources.append(source)
    }
}

/// Kept alive for the program's life; written only by `stopChildrenOnSignals`, at its start.
nonisolated(unsafe) private var signalSources: [any DispatchSourceSignal] = []

/// The PIDs whose parent is this process, from /proc/PID/stat (its fourth field, after
/// the command name in parentheses, which may itself hold spaces and parentheses).
public func childProcesses() -> [pid_t] {
    let me = getpid()
    guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
    return entries.compactMap { entry -> pid_t? in
        guard let pid = pid_t(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 1, let parent = pid_t(fields[1]) else { return nil }
        return parent == me ? pid : nil
    }
}
