// HCI command flow control, sans I/O (Core Specification v5.4, Vol 4, Part E,
// §4.4 "Command flow control" and §7.7.14/§7.7.15).
//
// The host may have as many commands outstanding as the last Command Complete or
// Command Status allowed (Num_HCI_Command_Packets); it starts with one. Each
// Command Complete / Command Status is matched to the oldest outstanding command
// with the same opcode. A command that times out stops waiting and gives its credit
// back (as BlueZ does) so that one lost answer does not wedge the controller.
//
// This type holds no clock and no transport: inputs go in, the commands to put on
// the wire and the commands to finish come out; `HCIController` executes them.

import DequeModule

public struct CommandFlow: Sendable {
    public struct Entry: Sendable, Equatable {
        public let id: UInt64
        public let opcode: HCIOpcode
        public let parameters: [UInt8]
        /// True when the command's success is reported by Command Status.
        public let completesWithStatus: Bool
    }

    /// How an outstanding command ended.
    public enum Outcome: Sendable, Equatable {
        /// Command Complete: its return parameters (Status first).
        case complete([UInt8])
        /// Command Status.
        case status(HCIStatus)
    }

    public private(set) var credits: Int = 1
    public private(set) var queued = Deque<Entry>()
    public private(set) var outstanding: [Entry] = []
    private var nextID: UInt64 = 1

    public init() {}

    /// Queues a command; returns its id and the commands that may now be sent.
    public mutating func submit(opcode: HCIOpcode, parameters: [UInt8], completesWithStatus: Bool) -> (id: UInt64, send: [Entry]) {
        let e = Entry(id: nextID, opcode: opcode, parameters: parameters, completesWithStatus: completesWithStatus)
        nextID += 1
        queued.append(e)
        return (e.id, drain())
    }

    /// A Command Complete arrived. Returns the command it finishes (nil for NOP or an
    /// unsolicited one) and the commands that may now be sent.
    public mutating func commandComplete(_ cc: CommandComplete) -> (finished: (Entry, Outcome)?, send: [Entry]) {
        credits = Int(cc.numHCICommandPackets)
        var finished: (Entry, Outcome)? = nil
        if cc.commandOpcode.rawValue != 0, let i = outstanding.firstIndex(where: { $0.opcode == cc.commandOpcode }) {
            finished = (outstanding.remove(at: i), .complete(cc.returnParameters))
        }
        return (finished, drain())
    }

    /// A Command Status arrived. A success for a command that expects Command Complete
    /// leaves it outstanding; any failure, or the status a command expects, finishes it.
    public mutating func commandStatus(_ cs: CommandStatus) -> (finished: (Entry, Outcome)?, send: [Entry]) {
        credits = Int(cs.numHCICommandPackets)
        var finished: (Entry, Outcome)? = nil
        if cs.commandOpcode.rawValue != 0,
           let i = outstanding.firstIndex(where: { $0.opcode == cs.commandOpcode && ($0.completesWithStatus || !cs.status.isSuccess) }) {
            finished = (outstanding.remove(at: i), .status(cs.status))
        }
        return (finished, drain())
    }

    /// The command's timer fired. Returns whether it was still waiting, and what may now be sent.
    public mutating func timedOut(id: UInt64) -> (wasWaiting: Bool, send: [Entry]) {
        if let i = queued.firstIndex(where: { $0.id == id }) {
            queued.remove(at: i)
            return (true, [])
        }
        guard let i = outstanding.firstIndex(where: { $0.id == id }) else { return (false, []) }
        outstanding.remove(at: i)
        credits = Swift.max(credits, 1)
        return (true, drain())
    }

    /// The caller gave up before the command was sent; returns true if it was removed.
    /// A command already on the wire stays outstanding so its answer is still matched.
    public mutating func withdraw(id: UInt64) -> Bool {
        guard let i = queued.firstIndex(where: { $0.id == id }) else { return false }
        queued.remove(at: i)
        return true
    }

    /// The transport went away: every queued and outstanding command, to be failed.
    public mutating func failAll() -> [Entry] {
        let all = Array(queued) + outstanding
        queued.removeAll()
        outstanding.removeAll()
        return all
    }

    private mutating func drain() -> [Entry] {
        var out: [Entry] = []
        while credits > 0, let e = queued.popFirst() {
            credits -= 1
            outstanding.append(e)
            out.append(e)
        }
        return out
    }
}
