"""Sources -> one Tick: attribute every GPU's use to a container slice, compute its
shares, assemble the Tick (slicemeter/tick.py is its wire contract).
"""
