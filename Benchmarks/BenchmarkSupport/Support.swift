// What the benchmark programs share: CPU and wall-time figures, printing as it
// goes, and the Bumble processes they measure against on Rootcanal.

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
